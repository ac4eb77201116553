// A stand-in for `python -m heterodl.dataset_worker`, for testing the worker
// pool (PythonWorker, PythonDataset) without Python: it speaks the protocol
// of proto/heterodl/python_worker.proto on descriptor --fd, and misbehaves
// as its --dataset spec says, so that each way a real worker fails can be
// made on purpose and on cue.
//
//   fake_dataset_worker -m heterodl.dataset_worker --fd 3 --dataset SPEC
//
// SPEC is comma-separated key=value pairs:
//   samples=N      the dataset's length (default 16)
//   load_error=M   says hello with load_error M
//   no_hello=1     exits before its hello
//   samples_from=F reads the length from file F instead (a dataset that
//                  depends on the process it runs in, when F changes)
//   error_on=I     sample I raises (its answer's error)
//   die_on=I       exits on sample I
//   hang_on=I      never answers sample I
//   garble_on=I    answers sample I with a record that is not JSON
//   once_dir=D     die_on, hang_on and garble_on fire once per worker pool:
//                  the first worker to meet the sample leaves a file in D
//
// A sample made is one uint8 field [4], every byte the index modulo 251.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/python_worker.pb.h"
#include "src/common/net/unix_socket.h"

namespace heterodl {
namespace {

constexpr uint32_t kSampleBytes = 4;

class FakeWorker {
 public:
  FakeWorker(int socket, std::map<std::string, std::string> spec)
      : socket_(socket), spec_(std::move(spec)) {}

  int Serve() {
    if (Has("no_hello")) {
      return 3;
    }
    SayHello();
    std::vector<char> buffer(1 << 20);
    while (true) {
      ReceivedBytes got = ReceiveWithDescriptors(socket_, buffer.data(), buffer.size());
      if (got.bytes <= 0) {
        return 0;  // the server closed its end
      }
      v1::PythonSampleTask task;
      const std::string json(buffer.data(), static_cast<size_t>(got.bytes));
      if (!google::protobuf::util::JsonStringToMessage(json, &task).ok()) {
        std::fprintf(stderr, "fake worker: not a task: %s\n", json.c_str());
        return 4;
      }
      for (const uint64_t region : task.forget()) {
        Unmap(region);
      }
      if (!got.descriptors.empty()) {
        if (!Map(task.region(), got.descriptors[0].get())) {
          return 5;
        }
      }
      if (!MakeSample(task)) {
        return 6;
      }
    }
  }

 private:
  bool Has(const std::string& key) const { return spec_.count(key) > 0; }

  // Whether sample `index` meets `behaviour`: named for it, and (with
  // once_dir) the first time in the pool.
  bool Fires(const std::string& behaviour, uint64_t index) const {
    const auto it = spec_.find(behaviour);
    if (it == spec_.end() || it->second != absl::StrCat(index)) {
      return false;
    }
    const auto once = spec_.find("once_dir");
    if (once == spec_.end()) {
      return true;
    }
    const std::string marker = absl::StrCat(once->second, "/", behaviour, "-", index);
    const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) {
      return false;  // another worker met it already
    }
    ::close(fd);
    return true;
  }

  void Send(const google::protobuf::Message& message) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(message, &json);
    (void)::send(socket_, json.data(), json.size(), MSG_NOSIGNAL);
  }

  void SayHello() {
    v1::PythonWorkerHello hello;
    if (Has("load_error")) {
      hello.set_load_error(spec_.at("load_error"));
      Send(hello);
      return;
    }
    uint64_t samples = 16;
    if (Has("samples")) {
      (void)absl::SimpleAtoi(spec_.at("samples"), &samples);
    }
    if (Has("samples_from")) {
      std::ifstream file(spec_.at("samples_from"));
      file >> samples;
    }
    hello.set_num_samples(samples);
    v1::FieldSpec* field = hello.add_fields();
    field->set_name("field_0");
    field->set_dtype(v1::DTYPE_UINT8);
    field->add_shape(kSampleBytes);
    hello.mutable_structure()->set_kind(v1::SampleNode::FIELD);
    Send(hello);
  }

  bool Map(uint64_t region, int fd) {
    struct stat about {};
    if (::fstat(fd, &about) != 0) {
      return false;
    }
    void* memory = ::mmap(nullptr, static_cast<size_t>(about.st_size), PROT_READ | PROT_WRITE,
                          MAP_SHARED, fd, 0);
    if (memory == MAP_FAILED) {
      return false;
    }
    maps_[region] = {static_cast<uint8_t*>(memory), static_cast<size_t>(about.st_size)};
    return true;
  }

  void Unmap(uint64_t region) {
    const auto it = maps_.find(region);
    if (it != maps_.end()) {
      ::munmap(it->second.data, it->second.size);
      maps_.erase(it);
    }
  }

  // False when the worker should end (told to die, or given a region it
  // never mapped).
  bool MakeSample(const v1::PythonSampleTask& task) {
    const uint64_t index = task.index();
    if (Fires("die_on", index)) {
      return false;
    }
    if (Fires("hang_on", index)) {
      while (true) {
        ::pause();
      }
    }
    if (Fires("garble_on", index)) {
      const std::string nonsense = "this is not a record";
      (void)::send(socket_, nonsense.data(), nonsense.size(), MSG_NOSIGNAL);
      return true;
    }
    v1::PythonSampleResult result;
    if (Fires("error_on", index)) {
      result.set_error(absl::StrCat("ValueError: sample ", index, " is broken"));
      Send(result);
      return true;
    }
    const auto it = maps_.find(task.region());
    if (it == maps_.end() || task.offsets_size() != 1 ||
        task.offsets(0) + kSampleBytes > it->second.size) {
      std::fprintf(stderr, "fake worker: a task for memory it was not given\n");
      return false;
    }
    std::memset(it->second.data + task.offsets(0), static_cast<int>(index % 251), kSampleBytes);
    Send(result);
    return true;
  }

  struct Mapping {
    uint8_t* data = nullptr;
    size_t size = 0;
  };
  const int socket_;
  const std::map<std::string, std::string> spec_;
  std::map<uint64_t, Mapping> maps_;
};

}  // namespace
}  // namespace heterodl

int main(int argc, char** argv) {
  int fd = -1;
  std::map<std::string, std::string> spec;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--fd") {
      fd = std::atoi(argv[++i]);
    } else if (flag == "--dataset") {
      for (const absl::string_view pair : absl::StrSplit(argv[++i], ',', absl::SkipEmpty())) {
        const std::pair<std::string, std::string> kv =
            absl::StrSplit(pair, absl::MaxSplits('=', 1));
        spec[kv.first] = kv.second;
      }
    }
  }
  if (fd < 0) {
    std::fprintf(stderr, "fake worker: no --fd\n");
    return 2;
  }
  return heterodl::FakeWorker(fd, std::move(spec)).Serve();
}
