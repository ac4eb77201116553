// RemoteLoader: the dnn group's data loader. Pulls the batches of one rank
// from any number of data servers and hands them over in order.
//
//   RemoteLoaderOptions options;
//   options.servers.fixed = {"algo-2:50051", "algo-3:50051"};
//   options.batch_size = 256;
//   options.rank = rank;
//   options.world_size = world_size;
//   ASSIGN_OR_RETURN(std::unique_ptr<RemoteLoader> loader, RemoteLoader::Connect(options));
//   for (uint32_t epoch = 0; epoch < epochs; ++epoch) {
//     loader->SetEpoch(epoch);
//     while (true) {
//       ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
//       if (!batch) break;  // end of epoch
//       Train(*batch);
//     }
//   }
//
// The batches of an epoch follow the epoch plan (src/plan/epoch_plan.h), which
// client and servers compute alike. Each server connection keeps one stream
// open for the loader's whole life, across epochs, and keeps as many batch ids
// requested as it measures it needs to keep that server's threads busy
// (src/client/depth_controller.h); the loader asks ahead of the trainer up to
// a memory budget, past the end of an epoch into the next, so the first
// batches of epoch e+1 are ready when SetEpoch(e + 1) comes. Every batch is
// checked against the plan before its pixels are read, and delivered in
// order. A server that fails or stalls has its outstanding ids handed to the
// others, and is retried with backoff; every batch reaches the trainer exactly
// once. Servers may join and leave while it runs (a servers file, a DNS name);
// one leaving politely (SIGTERM) sends what it has built and hands back the
// rest. The decisions are src/client/feed_schedule.h's; this file is wiring.
//
// This header is free of gRPC and protobuf: trainers include it next to
// LibTorch.
#ifndef HETERODL_SRC_CLIENT_REMOTE_LOADER_H_
#define HETERODL_SRC_CLIENT_REMOTE_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/client/batch.h"
#include "src/common/memory/buffer_pool.h"
#include "src/common/net/server_sources.h"
#include "src/common/net/tls_config.h"

namespace heterodl {

struct RemoteLoaderOptions {
  // The data servers: a fixed list (host:port), and where more are found
  // while the loader runs (src/client/server_discovery.h): a servers file
  // re-read when it changes, a DNS name whose every address is a server. A
  // server that appears is checked (its dataset's fingerprint, the token,
  // TLS) and gets batches within discovery_interval; one that disappears
  // hands what it owes to the others. At least one of the three.
  ServerSources servers;
  absl::Duration discovery_interval = absl::Seconds(2);
  uint32_t batch_size = 32;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t seed = 0;
  bool drop_last = false;
  // False: every epoch reads the dataset in order (PyTorch's shuffle=False,
  // for evaluation); the split across ranks is DistributedSampler's either
  // way.
  bool shuffle = true;
  // > 0: the block-shuffled plan (src/plan/epoch_plan.h): shards permuted,
  // samples shuffled within windows of this many shards, so that servers
  // reading from object storage fetch whole chunks of few shards instead of
  // a request per sample. The servers' dataset must be tar shards or
  // TFRecord files (INVALID_ARGUMENT otherwise).
  uint32_t shuffle_block_shards = 0;
  // > 0: every epoch is the rest of one that a run at another world size or
  // batch size began, the first `epoch_offset` samples of its permutation
  // left out (PlanParams::epoch_offset, SamplesConsumed: a resume). Below
  // the dataset's size (INVALID_ARGUMENT otherwise).
  uint64_t epoch_offset = 0;
  // Augmentation pipeline spec; empty: the servers' default.
  std::string pipeline;
  // Memory for batches requested or received ahead of the trainer: the
  // loader asks at most this many bytes of batches ahead (at least 2
  // batches, at most 256). 1 GiB is 26 batches of 256 x 224 x 224 x 3.
  uint64_t max_buffered_bytes = 1ull << 30;
  // Batches larger than this are refused (FAILED_PRECONDITION), whatever a
  // server announces: a server cannot make the trainer allocate more.
  uint64_t max_batch_bytes = 1ull << 30;
  // Ask for the next epochs' first batches before the trainer reaches them.
  // False restores a bubble at every epoch's start (for measuring it).
  bool prefetch_across_epochs = true;
  // TCP connections to each server, each with its own stream and pixel
  // channel. One connection can cap throughput: clouds cap a single flow
  // (5 Gb/s on EC2 outside a placement group), and on loopback one gRPC
  // connection carried 3 GB/s, two 4 GB/s (bench transport, pixels in gRPC).
  int connections_per_server = 2;
  // Receive pixels on a pixel channel (src/wire/pixel_channel.h) beside each
  // stream when the server offers one and TLS is off: recv() writes them
  // straight into Batch::images, half the CPU per byte of gRPC's path. When
  // the channel's port cannot be reached, pixels go through gRPC (with a
  // warning) and the port is tried again 10 minutes later.
  bool pixel_channel = true;
  // With pixel_channel: when a server runs on this host and builds its
  // batches in shared memory (DatasetInfo.pixel_socket), copy the pixels
  // from there instead of reading them from a TCP socket (one copy in user
  // space instead of two in the kernel and the TCP stack around them). A
  // server on another host is reached over TCP as before.
  bool same_host_pixels = true;
  // How long Connect() waits for servers to answer. A server that refuses
  // connections or does not resolve is said at once (and once per new
  // reason) while the wait goes on: clusters start servers and trainers in
  // any order.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Polled about five times a second while Connect() waits for servers:
  // true abandons it with CANCELLED (a launcher's Ctrl-C, Python's
  // KeyboardInterrupt). Called without the loader's locks held.
  std::function<bool()> interrupt_connect;
  // The same while Next() waits for a batch; the loader stays usable and a
  // later Next() goes on where this one stopped.
  std::function<bool()> interrupt_next;
  // A server holding requested batches without sending one for half this
  // long loses them to the others; with no server delivering for this long,
  // Next() fails with DEADLINE_EXCEEDED.
  absl::Duration stall_timeout = absl::Seconds(60);
  // A sample that a server cannot read or decode is replaced in its batch
  // (and logged here, with the server's reason); once more than this share
  // of an epoch's samples of this rank have failed, Next() fails with
  // DATA_LOSS naming the dataset, rather than train on replacements. 1:
  // never. The default, a few percent, lets a scraped dataset with some
  // corrupt files train on, and stops a list of missing files at once.
  double max_failed_fraction = 0.05;
  // The servers' shared token (their --auth-token-file); empty: none.
  std::string auth_token;
  // TLS to the servers (a CA to verify them; cert + key for mutual TLS).
  TlsConfig tls;
  // Memory for received pixels (Batch::images): heap by default; a CUDA
  // trainer passes pinned memory, so the batch is copied once, from gRPC's
  // receive buffers straight into memory the device can read.
  HostAllocator pixel_allocator;
};

// What the servers serve, as the first server that answered describes it.
struct DatasetDescription {
  // Where the servers read it (a path on their hosts), for messages.
  std::string source;
  uint64_t fingerprint = 0;
  uint64_t num_samples = 0;
  std::vector<std::string> class_names;
  int height = 0;  // of the servers' default pipeline
  int width = 0;
  // What its batches hold (Batch::fields): "images", and "masks" for a
  // segmentation dataset, "boxes", "box_labels", "iscrowd" for detection.
  std::vector<std::string> fields;
  // A user's own Python dataset's: how its fields make a sample
  // (DatasetInfo.sample_structure, in protobuf's JSON); empty for others.
  std::string sample_structure;
  // Its samples are (image uint8 [H, W, 3], int64 label) (IsLabelledImages):
  // field 0 is the images and Batch::labels the labels, as in a
  // classification dataset's batches.
  bool labelled_images = false;
};

// Where the loader is: resume with SetEpoch(position.epoch, position.next_batch).
struct LoaderPosition {
  uint32_t epoch = 0;
  int64_t next_batch = 0;
};

// What the loader has done so far, for benchmarks and logs.
struct LoaderStats {
  int64_t requested = 0;  // batch ids asked of servers
  int64_t received = 0;
  int64_t delivered = 0;  // handed to the trainer
  // Built ahead and then not wanted: the trainer repositioned (another
  // epoch, a resume point) where they did not lie.
  int64_t dropped = 0;
  // Now: batches received and not yet taken, and asked of servers and not
  // yet arrived. When the trainer stops reading, these were built for
  // nothing (SetEnd keeps them to none at a run's end).
  int held_ahead = 0;
  int in_flight = 0;
  // Asked again of another connection after a stream failed or stalled.
  int64_t reassigned = 0;
  // Streams cancelled for holding batches half a stall_timeout without
  // sending one (a server that leaves politely never counts here).
  int64_t stalled = 0;
  // Over the batches delivered: samples replaced because they could not be
  // read or decoded, and samples decoded around damaged data (kept).
  int64_t samples_failed = 0;
  int64_t samples_decoded_with_warnings = 0;
  int window = 0;                    // batches the loader may hold ahead
  std::vector<int> depths;           // per connection: batch ids it keeps requested
  std::vector<std::string> servers;  // in use now (listed), sorted
  // Open streams whose pixels come from a same-host server's shared memory.
  int same_host_streams = 0;
};

class RemoteLoader {
 public:
  // Asks every server for its dataset description, waiting up to
  // connect_timeout for one to answer, and 2 s more for the others once one
  // has. Fails naming the servers when none answers, or naming both sides
  // when two servers serve different datasets (fingerprints differ). Servers
  // that did not answer in time are still used once they come up (and not
  // if they serve another dataset).
  static absl::StatusOr<std::unique_ptr<RemoteLoader>> Connect(const RemoteLoaderOptions& options);
  virtual ~RemoteLoader() = default;

  virtual const DatasetDescription& dataset() const = 0;
  // Batches this rank gets per epoch.
  virtual int64_t size() const = 0;
  // Samples this rank gets per epoch (the last batch may be short).
  virtual int64_t samples_per_rank() const = 0;
  // Starts epoch `epoch` at batch `start_batch` (for resuming a checkpoint).
  // Batches fetched ahead that this order still reaches are kept (the next
  // epoch's first ones, at an epoch boundary); the others are dropped and
  // counted in stats(). Fetching starts with the first SetEpoch (or Next).
  // INVALID_ARGUMENT for a start outside [0, size()] or an epoch over
  // 1,000,000.
  virtual absl::Status SetEpoch(uint32_t epoch, int64_t start_batch) = 0;
  // Epoch `epoch` from its first batch.
  absl::Status SetEpoch(uint32_t epoch) { return SetEpoch(epoch, 0); }
  // The trainer reads no batch at or after batch `end_batch` of `epoch`
  // (the end of its last epoch: (last, size()); a step count's end): the
  // loader asks no server for one, so a run's last steps leave nothing
  // built for nothing. Without it, the loader fetches ahead into the next
  // epoch as the current one ends. INVALID_ARGUMENT for an end_batch
  // outside [0, size()].
  virtual absl::Status SetEnd(uint32_t epoch, int64_t end_batch) = 0;
  // The next batch in order; nullopt at the end of the epoch. Fails when no
  // server delivers within stall_timeout (DEADLINE_EXCEEDED naming each
  // server's last error), when a server refuses the plan (e.g. a dataset
  // mismatch), or with CANCELLED when interrupt_next says so.
  virtual absl::StatusOr<std::optional<Batch>> Next() = 0;
  virtual LoaderPosition position() const = 0;
  virtual LoaderStats stats() const = 0;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_CLIENT_REMOTE_LOADER_H_
