// How the remote loader's pixels travel: copied from a same-host server's
// shared memory, on a pixel channel beside gRPC, or inside gRPC when the
// server offers no channel or its port cannot be reached; the batches are the
// same every way.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "heterodl/coco.pb.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "src/client/remote_loader.h"
#include "src/client/server_status.h"
#include "tests/testing/served_dataset.h"
#include "tests/testing/test_images.h"

namespace heterodl {
namespace {

using testing::RunningServer;

class PixelTransportTest : public testing::ServedDatasetTest {
 protected:
  // Epoch `epoch` read three ways, which must agree byte for byte: from
  // `options`' server through shared memory, the same over a TCP pixel
  // channel, and from `other_server` inside gRPC alone. Fails the test
  // (returning what was read) when a loader cannot connect or the three read
  // different numbers of batches.
  static std::vector<Batch> ReadEpochThreeWays(RemoteLoaderOptions options,
                                               const std::string& other_server, uint32_t epoch) {
    auto shared = RemoteLoader::Connect(options);
    options.same_host_pixels = false;
    auto tcp = RemoteLoader::Connect(options);
    options.pixel_channel = false;
    options.servers.fixed = {other_server};
    auto grpc_only = RemoteLoader::Connect(options);
    if (!shared.ok() || !tcp.ok() || !grpc_only.ok()) {
      ADD_FAILURE() << "cannot connect: " << shared.status() << ", " << tcp.status() << ", "
                    << grpc_only.status();
      return {};
    }
    std::vector<Batch> a = ReadEpoch(**shared, epoch);
    const std::vector<Batch> b = ReadEpoch(**tcp, epoch);
    const std::vector<Batch> c = ReadEpoch(**grpc_only, epoch);
    EXPECT_EQ(b.size(), a.size());
    EXPECT_EQ(c.size(), a.size());
    for (size_t k = 0; k < std::min({a.size(), b.size(), c.size()}); ++k) {
      EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "batch " << k;
      EXPECT_EQ(a[k].payload.view(), c[k].payload.view()) << "batch " << k;
    }
    return a;
  }
};

// Forwards TCP connections from 127.0.0.2:port() to a target port on
// 127.0.0.1, byte for byte: a server reached through it has its gRPC service
// at 127.0.0.2 but nothing else there, as behind a firewall that opens only
// the service's port.
class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(2, 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpForwarder() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    {
      absl::MutexLock lock(&mu_);
      for (int fd : sockets_) {
        ::shutdown(fd, SHUT_RDWR);
      }
    }
    for (std::thread& pump : pumps_) {
      pump.join();
    }
    for (int fd : sockets_) {
      ::close(fd);
    }
  }
  std::string address() const { return absl::StrCat("127.0.0.2:", port_); }

 private:
  static sockaddr_in Loopback(int last_byte, int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(0x7f000000 | last_byte);
    return address;
  }
  void AcceptLoop() {
    while (true) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) {
        return;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target = Loopback(1, target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      absl::MutexLock lock(&mu_);
      sockets_.insert(sockets_.end(), {client, server});
      pumps_.emplace_back([client, server] { Pump(client, server); });
      pumps_.emplace_back([client, server] { Pump(server, client); });
    }
  }
  static void Pump(int from, int to) {
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0 || ::send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
        break;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> sockets_;  // guarded by mu_ until the acceptor is joined
  std::vector<std::thread> pumps_;
};

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// The batches of an epoch of the 60-sample test dataset for one rank hold
// every sample exactly once.
void ExpectEverySampleOnce(const std::vector<Batch>& batches) {
  std::multiset<int64_t> seen;
  for (const Batch& batch : batches) {
    seen.insert(batch.indices.begin(), batch.indices.end());
  }
  EXPECT_EQ(seen.size(), 60u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 60u);
}

// `count()` once `loader` has read a batch, polled until it is `expected`
// (streams open and close on their own threads) or 10 s have passed.
template <typename Count>
auto CountWhileReading(RemoteLoader& loader, decltype(std::declval<Count>()()) expected,
                       Count count) {
  EXPECT_TRUE(loader.SetEpoch(0).ok());
  absl::StatusOr<std::optional<Batch>> batch = loader.Next();
  EXPECT_TRUE(batch.ok() && batch->has_value());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  auto counted = count();
  while (counted != expected && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    counted = count();
  }
  return counted;
}

// The server's count of open streams with a pixel channel.
uint32_t PixelChannelStreamsWhileReading(RemoteLoader& loader, const std::string& server,
                                         uint32_t expected) {
  return CountWhileReading(loader, expected, [&server]() -> uint32_t {
    absl::StatusOr<v1::ServerStats> status = FetchServerStatus(server, absl::Seconds(5));
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->pixel_channel_streams() : 0;
  });
}

TEST_F(PixelTransportTest, PixelChannelsAndGrpcCarryTheSameBatches) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 1, 2);
  auto with_channel = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(with_channel.ok() && grpc_only.ok());
  // Each of the loader's two connections has its channel; gRPC only has none.
  EXPECT_EQ(PixelChannelStreamsWhileReading(**with_channel, server.address(), 2), 2u);
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 2), 2u);
  with_channel->reset();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**grpc_only, server.address(), 0), 0u);

  with_channel = RemoteLoader::Connect(LoaderOptions({server.address()}, 1, 2));
  ASSERT_TRUE(with_channel.ok());
  const std::vector<Batch> a = ReadEpoch(**with_channel, 3);
  const std::vector<Batch> b = ReadEpoch(**grpc_only, 3);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].indices, b[k].indices);
    EXPECT_EQ(a[k].labels, b[k].labels);
    EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "batch " << k;
  }
}

// The number of the loader's open streams on a same-host channel.
int SameHostStreamsWhileReading(RemoteLoader& loader, int expected) {
  return CountWhileReading(loader, expected,
                           [&loader] { return loader.stats().same_host_streams; });
}

TEST_F(PixelTransportTest, ASameHostLoaderCopiesFromSharedMemoryTheSameBatches) {
  RunningServer server(*dataset_);
  RemoteLoaderOptions options = LoaderOptions({server.address()}, 1, 2);
  auto shared = RemoteLoader::Connect(options);
  options.same_host_pixels = false;
  auto tcp = RemoteLoader::Connect(options);
  options.pixel_channel = false;
  auto grpc_only = RemoteLoader::Connect(options);
  ASSERT_TRUE(shared.ok() && tcp.ok() && grpc_only.ok());
  EXPECT_EQ(SameHostStreamsWhileReading(**shared, 2), 2);
  EXPECT_EQ(SameHostStreamsWhileReading(**tcp, 0), 0);
  EXPECT_EQ(SameHostStreamsWhileReading(**grpc_only, 0), 0);

  // Several epochs: the server's batch buffers are reused many times over
  // while the loader keeps its mappings.
  for (uint32_t epoch = 0; epoch < 4; ++epoch) {
    const std::vector<Batch> a = ReadEpoch(**shared, epoch);
    const std::vector<Batch> b = ReadEpoch(**tcp, epoch);
    const std::vector<Batch> c = ReadEpoch(**grpc_only, epoch);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    ASSERT_FALSE(a.empty());
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].indices, b[k].indices);
      EXPECT_EQ(a[k].payload.view(), b[k].payload.view()) << "epoch " << epoch << " batch " << k;
      EXPECT_EQ(a[k].payload.view(), c[k].payload.view()) << "epoch " << epoch << " batch " << k;
    }
  }
  EXPECT_GT((*shared)->stats().same_host_streams, 0);
}

TEST_F(PixelTransportTest, SegmentationBatchesCarryTheirMasksEveryWayAndFromAnyServer) {
  const std::filesystem::path root = testing::MakePaintedSegmentationFolder("served-masks", 30, 8);
  RunningServer first(root.string());
  RunningServer second(root.string());
  RemoteLoaderOptions options = LoaderOptions({first.address()}, 0, 1);
  options.pipeline = "random_resized_crop(40x48)|hflip(0.5)|rotation(20)";
  const std::vector<Batch> a = ReadEpochThreeWays(options, second.address(), 1);
  ASSERT_EQ(a.size(), 5u);  // 30 samples in batches of 7
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].fields.size(), 2u);
    EXPECT_EQ(a[k].fields[0].name, "images");
    const absl::StatusOr<absl::Span<const uint8_t>> masks = a[k].View<uint8_t>("masks");
    ASSERT_TRUE(masks.ok()) << masks.status();
    ASSERT_EQ(masks->size(), static_cast<size_t>(a[k].size()) * 40 * 48);
    EXPECT_TRUE(absl::IsInvalidArgument(a[k].View<int32_t>("masks").status()));
    EXPECT_TRUE(absl::IsNotFound(a[k].View<float>("boxes").status()));
    for (int64_t slot = 0; slot < a[k].size(); ++slot) {
      int64_t judged = 0;
      const int64_t off =
          testing::PixelsOffTheirClass(a[k].images().data() + slot * 40 * 48 * 3,
                                       masks->data() + slot * 40 * 48, 40, 48, 1, 1, 255, &judged);
      EXPECT_LE(off, judged / 100) << "batch " << k << ", sample " << slot;
      EXPECT_GT(judged, 40 * 48 / 2);
    }
  }
}

// A COCO instances file over a painted segmentation folder: each class's
// pixels' bounding box as its object, and sample 0 crowded with 40 more
// (past the objects a batch is planned for).
std::string WriteCocoOfPaintedFolder(const std::filesystem::path& root, int count) {
  v1::CocoInstances coco;
  for (int id = 1; id <= 3; ++id) {
    v1::CocoCategory* category = coco.add_categories();
    category->set_id(id);
    category->set_name(absl::StrCat("shape", id));
  }
  for (int n = 0; n < count; ++n) {
    const std::string stem = absl::StrCat("s", n);
    const cv::Mat mask =
        cv::imread((root / "masks" / (stem + ".png")).string(), cv::IMREAD_UNCHANGED);
    v1::CocoImage* image = coco.add_images();
    image->set_id(n + 1);
    image->set_file_name(absl::StrCat("images/", stem, ".png"));
    const auto add = [&](int category, const cv::Rect& box) {
      v1::CocoAnnotation* annotation = coco.add_annotations();
      annotation->set_id(coco.annotations_size());
      annotation->set_image_id(n + 1);
      annotation->set_category_id(category);
      for (const int value : {box.x, box.y, box.width, box.height}) {
        annotation->add_bbox(value);
      }
    };
    for (int id = 1; id <= 3; ++id) {
      const cv::Mat of_class = mask == id;
      if (cv::countNonZero(of_class) > 0) {
        add(id, cv::boundingRect(of_class));
      }
    }
    for (int extra = 0; n == 0 && extra < 40; ++extra) {
      add(1 + extra % 3, cv::Rect(extra % 8 * 5, extra / 8 * 5, 10, 10));
    }
  }
  std::string json;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(coco, &json).ok());
  testing::WriteFile(root / "instances.json", json);
  return (root / "instances.json").string();
}

TEST_F(PixelTransportTest, DetectionBatchesCarryTheirBoxesEveryWayAndFromAnyServer) {
  const std::filesystem::path root = testing::MakePaintedSegmentationFolder("served-boxes", 30, 9);
  const std::string annotations = WriteCocoOfPaintedFolder(root, 30);
  RunningServer first(annotations);
  RunningServer second(annotations);
  RemoteLoaderOptions options = LoaderOptions({first.address()}, 0, 1);
  options.shuffle = false;
  options.pipeline = "resize(40x48)|hflip(0.5)";
  const std::vector<Batch> a = ReadEpochThreeWays(options, second.address(), 2);
  ASSERT_EQ(a.size(), 5u);
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].fields.size(), 4u);
    const FieldSlice* boxes_field = a[k].Field("boxes");
    ASSERT_NE(boxes_field, nullptr);
    ASSERT_TRUE(boxes_field->ragged);
    const absl::StatusOr<absl::Span<const float>> boxes = a[k].View<float>("boxes");
    const absl::StatusOr<absl::Span<const int64_t>> labels = a[k].View<int64_t>("box_labels");
    ASSERT_TRUE(boxes.ok() && labels.ok());
    size_t first_box = 0;
    for (int64_t slot = 0; slot < a[k].size(); ++slot) {
      const uint32_t count = boxes_field->lengths[static_cast<size_t>(slot)];
      if (k == 0 && slot == 0) {
        EXPECT_GT(count, 32u);  // more than a batch is planned for
      }
      // Every pixel painted a class's colour lies in one of that class's
      // boxes (a pixel and a half of slack for the blended edges).
      const uint8_t* image = a[k].images().data() + slot * 40 * 48 * 3;
      for (int y = 0; y < 40; ++y) {
        for (int x = 0; x < 48; ++x) {
          const uint8_t* pixel = image + static_cast<ptrdiff_t>(y * 48 + x) * 3;
          for (int id = 1; id <= 3; ++id) {
            const unsigned char* colour = testing::kPaintedColours[id];
            if (std::abs(pixel[0] - colour[0]) + std::abs(pixel[1] - colour[1]) +
                    std::abs(pixel[2] - colour[2]) >
                12) {
              continue;
            }
            bool inside = false;
            for (size_t i = first_box; i < first_box + count && !inside; ++i) {
              const float* box = &(*boxes)[i * 4];
              inside = (*labels)[i] == id && x + 1.5 >= box[0] && x - 0.5 <= box[2] &&
                       y + 1.5 >= box[1] && y - 0.5 <= box[3];
            }
            ASSERT_TRUE(inside) << "batch " << k << ", sample " << slot << ": pixel " << x << ","
                                << y << " of class " << id << " in none of its boxes";
          }
        }
      }
      first_box += count;
    }
    EXPECT_EQ(first_box * 4, boxes->size());
  }
}

TEST_F(PixelTransportTest, AServerWithoutSameHostPixelsServesOnItsPixelPort) {
  DataServerOptions options = RunningServer::Options(*dataset_);
  options.same_host_pixels = false;  // serve --no-same-host-pixels
  RunningServer server(options);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(SameHostStreamsWhileReading(**loader, 0), 0);
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 2), 2u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(PixelTransportTest, AServerWithoutPixelChannelsServesThroughGrpc) {
  RunningServer server(*dataset_, "127.0.0.1:0", "", /*pixel_port=*/-1);
  auto loader = RemoteLoader::Connect(LoaderOptions({server.address()}, 0, 1));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

TEST_F(PixelTransportTest, AnUnreachablePixelPortFallsBackToGrpc) {
  RunningServer server(*dataset_);
  TcpForwarder forwarder(PortOf(server.address()));
  // Through the forwarder the service answers, but the pixel port (bound on
  // 127.0.0.1) refuses: the loader warns and carries the pixels in gRPC.
  // (The same-host socket would be reached: this is about another host.)
  RemoteLoaderOptions options = LoaderOptions({forwarder.address()}, 0, 1);
  options.same_host_pixels = false;
  auto loader = RemoteLoader::Connect(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(PixelChannelStreamsWhileReading(**loader, server.address(), 0), 0u);
  ExpectEverySampleOnce(ReadEpoch(**loader, 1));
}

}  // namespace
}  // namespace heterodl
