#include "launcher/flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/common/net/auth_token.h"

ABSL_FLAG(std::string, python_dataset, "",
          "serve, local, launch: MODULE:CALLABLE, a user's own map-style PyTorch Dataset "
          "(CALLABLE() returns it) served instead of --dataset, its samples made by "
          "--python-workers processes and "
          "collated as default_collate does (docs/python.md)");
ABSL_FLAG(std::vector<std::string>, python_path, {},
          "folders searched first for --python-dataset's MODULE (comma-separated)");
ABSL_FLAG(int32_t, python_workers, 0,
          "worker processes of --python-dataset, per server (0: one per core; local: "
          "the server's share of the cores)");
ABSL_FLAG(std::string, python, "",
          "a Python interpreter (a path, or a name looked up in PATH). serve, local, launch: the "
          "one that runs "
          "--python-dataset's workers, heterodl installed for it (default python3); bench: "
          "the one with torchvision, for the peers (default: the build's .venv)");
ABSL_FLAG(absl::Duration, python_sample_timeout, absl::Minutes(5),
          "a --python-dataset worker that takes longer over one sample is replaced, and "
          "the sample tried once more");
ABSL_FLAG(std::string, dataset, "",
          "dataset: an image folder (DIR/CLASS/IMAGE.jpg, classes sorted), a file list (a text "
          "file of path<TAB>label lines, paths relative to it), WebDataset tar shards (a .tar "
          "file or a folder of them, KEY.jpg|png|webp + KEY.cls per sample, uncompressed), "
          "TFRecord files of tf.train.Example records (a file or a folder of them, known by "
          "their content; --tfrecord-*-key), a segmentation folder (images/ + masks/) or a COCO "
          "annotations .json; each on local disk or in object storage as s3://BUCKET/KEY (a "
          "prefix is a folder: s3://my-data/imagenet/train/)");
ABSL_FLAG(std::string, s3_endpoint, "",
          "an S3-compatible endpoint for s3:// datasets (MinIO, Ceph, ...), e.g. "
          "http://minio:9000 (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else Amazon S3)");
ABSL_FLAG(std::string, s3_region, "",
          "the region s3:// requests are signed for (default: $AWS_REGION, $AWS_DEFAULT_REGION, "
          "the AWS profile's, else us-east-1)");
ABSL_FLAG(std::string, s3_addressing, "auto",
          "how buckets are addressed: path (ENDPOINT/BUCKET/KEY), virtual (BUCKET.ENDPOINT/KEY) "
          "or auto (path for a custom --s3-endpoint, virtual for Amazon S3)");
ABSL_FLAG(bool, s3_no_sign, false,
          "send s3:// requests unsigned (a public bucket): no AWS credentials looked for");
ABSL_FLAG(std::string, pipeline, "",
          "augmentation pipeline, e.g. 'random_resized_crop(224)|hflip(0.5)' (default)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the epoch plan and the augmentations");
ABSL_FLAG(uint32_t, shuffle_block_shards, 0,
          "> 0: shuffle in blocks, for tar shards or TFRecord files in object storage: shards "
          "permuted, samples shuffled within windows of this many shards, so that servers read "
          "whole chunks of few shards instead of a request per sample (0: every sample "
          "shuffled at once)");
ABSL_FLAG(int32_t, batch_size, 32, "samples per batch, per rank");

ABSL_FLAG(std::string, address, "",
          "serve: address to bind (default: 0.0.0.0:--port; under launch, this host's name in "
          "the cluster view)");
ABSL_FLAG(int32_t, port, -1, "serve: port to listen on (0 picks a free one; default 50051)");
ABSL_FLAG(std::string, port_file, "", "serve: write the bound port to this file once listening");
ABSL_FLAG(int32_t, metrics_port, -1,
          "serve, train: serve Prometheus metrics at http://HOST:PORT/metrics (train: its "
          "leader rank's; 0 picks a free port; default: $HETERODL_METRICS_PORT, else off)");
ABSL_FLAG(int32_t, threads, 0, "serve: decode/augment threads (0: one per core)");
ABSL_FLAG(int32_t, worker_nice, 10,
          "serve: how much nicer the decode threads run than the server's others (0-19), so a "
          "trainer sharing the host keeps its cores");
ABSL_FLAG(int64_t, max_pixels, 100'000'000,
          "serve: refuse (and replace) images whose header claims more pixels");
ABSL_FLAG(int64_t, max_file_mb, 256,
          "serve: a sample file (or tar member) larger than this many MiB is a bad sample, "
          "refused before it is read; files that are not regular (a FIFO, a device) are too");
ABSL_FLAG(double, min_box_visibility, 0.0,
          "serve: a detection dataset's boxes of which less than this fraction is left in the "
          "image after the pipeline's crops are dropped (0: any part; boxes under a pixel wide "
          "or high are always dropped)");
ABSL_FLAG(std::string, image_root, "",
          "serve: where a COCO annotations file's images are (--dataset annotations.json); "
          "default: the file's folder");
ABSL_FLAG(std::string, cache_dir, "",
          "a local folder where samples read from an s3:// dataset are kept, so that later "
          "epochs (and a server restarted on this host) do not fetch them again (default: none)");
ABSL_FLAG(int64_t, cache_mb, 10240,
          "at most this many MiB in --cache-dir; the least recently used samples go first");
ABSL_FLAG(int64_t, read_chunk_mb, 8,
          "tar shards and TFRecord files in object storage, read for a block-shuffled plan "
          "(--shuffle-block-shards): the chunks a shard is read in, one range GET each");
ABSL_FLAG(int64_t, chunk_memory_mb, 2048,
          "the memory that holds those chunks while batches take samples from them (the least "
          "recently used go first): a window of shards, K x the shards' size, fits in it");
ABSL_FLAG(std::string, tfrecord_image_key, "image/encoded",
          "serve: a TFRecord dataset's feature holding each record's encoded image");
ABSL_FLAG(std::string, tfrecord_label_key, "image/class/label",
          "serve: a TFRecord dataset's int64 feature holding each record's class label (empty: "
          "none, for segmentation records)");
ABSL_FLAG(int64_t, tfrecord_label_offset, 0,
          "serve: subtracted from every TFRecord label (1 for TensorFlow's ImageNet records, "
          "labelled 1..1000, to number classes from 0 as torchvision's models do)");
ABSL_FLAG(std::string, tfrecord_mask_key, "",
          "serve: a TFRecord dataset's feature holding each record's mask, a PNG of class ids "
          "(e.g. image/segmentation/class/encoded); set: segmentation samples");
ABSL_FLAG(std::string, dataset_root, "",
          "serve: every sample file must lie beneath this directory: a file list naming a path "
          "outside it (../, an absolute path) is refused at start, a symlink leading out is a bad "
          "sample");
ABSL_FLAG(bool, strict_decode, false,
          "serve: replace samples whose JPEG data is damaged but decodable (a scan that ends "
          "early) instead of decoding them as libjpeg fills them, as PIL and torchvision do; "
          "either way they are counted (docs/pipeline.md, 'Damaged images')");
ABSL_FLAG(int32_t, ignore_index, 255,
          "serve: the class id a segmentation dataset's masks get where padding or a rotation's "
          "corners leave no pixel, and in a sample no replacement could fill: a loss told "
          "ignore_index skips them (0-255 for 8-bit masks, up to 65535 for 16-bit ones)");
ABSL_FLAG(bool, strict_dataset, false,
          "serve: refuse to start when the dataset's file list names files that do not exist "
          "(default: report them and replace their samples)");
ABSL_FLAG(int64_t, synthetic, 0,
          "serve: serve this many synthetic samples (no files, no decoding) instead of --dataset, "
          "to measure the transport");
ABSL_FLAG(int32_t, max_streams, 256,
          "serve: most batch streams open at once (a loader opens one per connection)");
ABSL_FLAG(int64_t, max_stream_mb, 2048,
          "serve: most MB of batches one stream may have requested and not received");
ABSL_FLAG(int32_t, max_streams_per_host, 0,
          "serve: most batch streams open at once from one host, so one client cannot hold "
          "every slot (0: half of --max-streams)");
ABSL_FLAG(int64_t, max_memory_mb, 0,
          "serve: most MB of batches all streams together may have requested and not received; "
          "more wait, and a batch larger than this alone is refused (0: half of this machine's "
          "or container's memory)");
ABSL_FLAG(absl::Duration, unread_timeout, absl::Seconds(30),
          "serve: while batches wait for --max-memory-mb, a stream whose batches have waited "
          "this long unread is ended (its loader asks again; nothing is lost)");
ABSL_FLAG(int64_t, max_pipeline_cost, 2000,
          "serve: refuse a pipeline whose estimated work per sample passes this many million "
          "pixel operations (docs/operations.md, 'What a server defends against')");
ABSL_FLAG(int32_t, pixel_port, 0,
          "serve: TCP port for pixel channels, which carry batch pixels beside the gRPC streams "
          "without copies (0: any free port; -1: off, pixels go through gRPC; always off under "
          "TLS)");
ABSL_FLAG(bool, same_host_pixels, true,
          "serve: build batches in shared memory, from which loaders on this host copy them "
          "(false: they read them from the pixel port like any other)");
ABSL_FLAG(bool, pixel_channel, true,
          "train: receive pixels on the servers' pixel channels when they offer them (not "
          "under TLS); false: through gRPC");
ABSL_FLAG(std::string, tls_cert, "",
          "serve: certificate chain (PEM) for TLS; train/status: the client certificate for "
          "mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "the private key (PEM) of --tls-cert");
ABSL_FLAG(std::string, tls_ca, "",
          "serve: require client certificates signed by this CA (mutual TLS); train/status: "
          "use TLS and verify the servers against this CA");
ABSL_FLAG(std::string, tls_server_name, "",
          "train/status: the name to verify in the servers' certificates when they are "
          "addressed by IP");
ABSL_FLAG(std::string, auth_token_file, "",
          "serve: require this file's token on every call; train/local/status: send it");
ABSL_FLAG(absl::Duration, idle_timeout, absl::Minutes(10),
          "serve: exit when no client has been connected for this long");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Minutes(30),
          "serve: exit when no client comes within this long of starting");

ABSL_FLAG(std::string, model, "small_cnn",
          "train: small_cnn, resnet18, resnet50, or the path of a TorchScript file");
ABSL_FLAG(int64_t, steps, 0, "train: stop after this many steps (0: run --epochs)");
ABSL_FLAG(int32_t, epochs, 1, "train: epochs to run when --steps is 0");
ABSL_FLAG(double, lr, 0.05, "train: peak learning rate");
ABSL_FLAG(std::string, optimizer, "sgd", "train: sgd (with --momentum) or adamw");
ABSL_FLAG(double, momentum, 0.9, "train: SGD momentum");
ABSL_FLAG(double, weight_decay, 1e-4, "train: weight decay (decoupled for adamw)");
ABSL_FLAG(int64_t, warmup_steps, 0, "train: linear learning-rate warmup steps");
ABSL_FLAG(std::string, lr_schedule, "cosine", "train: after warmup, cosine (to 0) or constant");
ABSL_FLAG(std::string, device, "auto", "train: auto (CUDA when present), cpu or cuda");
ABSL_FLAG(double, device_step_ms, 0,
          "train/bench step: model the accelerator as busy this long per step instead of "
          "running the model (0: run it)");
ABSL_FLAG(std::string, precision, "auto", "train: auto (bf16 autocast on CUDA), fp32 or bf16");
ABSL_FLAG(double, bucket_mb, 25, "train: gradient all-reduce bucket size in MB");
ABSL_FLAG(std::string, memory_format, "auto",
          "train: auto (channels_last on CUDA, contiguous on CPU), contiguous (NCHW) or "
          "channels_last: the layout of the model's convolution weights and input "
          "(channels_last suits tensor-core GPUs in bf16)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "train: write DIR/checkpoint.pt every --checkpoint-every steps, at the end and when "
          "stopped by a signal");
ABSL_FLAG(int64_t, checkpoint_every, 0, "train: steps between checkpoints (0: only at the end)");
ABSL_FLAG(bool, resume, false, "train: continue from --checkpoint-dir/checkpoint.pt if present");
ABSL_FLAG(std::string, model_dir, "", "train: write the final weights to DIR/checkpoint.pt");
ABSL_FLAG(int32_t, local_rank, 0, "train: this rank's GPU on its host (internal)");
ABSL_FLAG(int32_t, ranks, 0, "train/local: trainer ranks (processes) on this host");
ABSL_FLAG(int32_t, servers, 2, "local: how many data servers to start (1-64)");
ABSL_FLAG(int32_t, rank, -1, "train: run only this global rank (internal; set by the launcher)");
ABSL_FLAG(int32_t, world_size, 0, "train: total ranks (internal; set by the launcher)");
ABSL_FLAG(std::string, master_addr, "", "train: rendezvous host (default: the cluster's leader)");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(120),
          "train: how long to wait for data servers and the other ranks");
ABSL_FLAG(std::string, metrics_file, "", "train/local: write per-step metrics as JSON lines");
ABSL_FLAG(double, max_failed_fraction, 0.05,
          "train/local: stop with an error once more than this share of a rank's samples of an "
          "epoch could not be read or decoded (each is replaced and logged until then; 1: never)");
ABSL_FLAG(std::string, sample_log_dir, "",
          "train/local: each rank logs the samples it trained on to DIR/rank<R>.samples");

ABSL_FLAG(std::string, role, "", "cluster: data | dnn | local (default: detected)");
ABSL_FLAG(std::string, data_servers, "",
          "train/cluster: the data servers, host:port,... (hostlist patterns as host[1-4]:port)");
ABSL_FLAG(std::string, data_servers_file, "",
          "train/status/cluster: a file of data servers (host:port per line), re-read when it "
          "changes while training runs");
ABSL_FLAG(std::string, data_servers_dns, "",
          "train/status/cluster: a DNS name (name[:port]) whose every address is a data server, "
          "re-resolved while training runs (a Kubernetes headless Service)");
ABSL_FLAG(std::string, dnn_hosts, "", "cluster: dnn hosts, host,...");
ABSL_FLAG(std::string, current_host, "", "cluster: this host's name in the host lists");
ABSL_FLAG(int32_t, ranks_per_host, 0, "cluster: trainer ranks per dnn host (default: GPUs, or 1)");
ABSL_FLAG(int32_t, master_port, 0, "cluster: rendezvous port on the leader (default 29500)");
ABSL_FLAG(
    std::string, resource_config, "",
    "cluster: SageMaker resourceconfig.json (default /opt/ml/input/config/resourceconfig.json)");
ABSL_FLAG(std::string, data_group, "", "cluster: SageMaker instance group of data hosts");
ABSL_FLAG(std::string, dnn_group, "", "cluster: SageMaker instance group of dnn hosts");
ABSL_FLAG(int32_t, slurm_data_component, -1,
          "cluster: Slurm het-job component that is the data group (default 0)");

ABSL_FLAG(bool, json, false, "print machine-readable JSON");
ABSL_FLAG(double, max_stall, 0.05,
          "plan/status: largest acceptable data stall (share of the step, in [0, 1))");
ABSL_FLAG(double, demand, 0,
          "status: images/s the trainers would consume without waiting (all ranks; e.g. "
          "batch x ranks x 1000 / synthetic-batch step ms): adds the data hosts needed");
ABSL_FLAG(std::string, prices, HETERODL_DEFAULT_PRICES,
          "plan/bench step: price table (CSV: instance_type,vcpus,gpus,usd_per_hour,network_gbps)");
ABSL_FLAG(std::string, gpu_instance, "ml.p3.2xlarge", "plan/bench step: the GPU instance type");
ABSL_FLAG(std::vector<std::string>, data_instance, {},
          "plan: data instance types to consider (default: every CPU-only type in the table); "
          "bench step: the type each data server is priced as (default ml.c5.9xlarge)");
ABSL_FLAG(int32_t, images, 512, "dataset sample: number of images");
ABSL_FLAG(std::string, sample_size, "",
          "dataset sample: every image exactly HxW pixels (height first, as pipeline sizes: "
          "1024x2048 for street scenes), a crop of that aspect; default 300-600 px wide");
ABSL_FLAG(std::string, task, "classification",
          "dataset sample: classification (photos under classes), segmentation "
          "(images/NAME.jpg + masks/NAME.png: shapes drawn on photos, 4 classes) or detection "
          "(the same images + annotations.json, COCO instances: each shape's box, 3 categories)");
ABSL_FLAG(std::string, formats, "jpeg",
          "dataset sample: how images are encoded: jpeg, grayscale, progressive, png, webp, "
          "'mixed', or shares like jpeg=60,png=40");
ABSL_FLAG(std::string, source_photos, "",
          "dataset sample: a folder of JPEG photos to cut the images from (default: Debian's "
          "mate-backgrounds, /usr/share/backgrounds/mate)");
ABSL_FLAG(bool, overwrite, false,
          "dataset sample: replace what the target directory holds instead of refusing");
ABSL_FLAG(std::string, log_level, "info",
          "the least severe log lines printed: debug, info, warning or error");

namespace heterodl {

std::vector<std::string> TrainingFlagsAsArguments() {
  return {absl::StrCat("--model=", absl::GetFlag(FLAGS_model)),
          absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
          absl::StrCat("--epochs=", absl::GetFlag(FLAGS_epochs)),
          absl::StrCat("--batch_size=", absl::GetFlag(FLAGS_batch_size)),
          absl::StrCat("--seed=", absl::GetFlag(FLAGS_seed)),
          absl::StrCat("--shuffle_block_shards=", absl::GetFlag(FLAGS_shuffle_block_shards)),
          absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)),
          absl::StrCat("--optimizer=", absl::GetFlag(FLAGS_optimizer)),
          absl::StrCat("--momentum=", absl::GetFlag(FLAGS_momentum)),
          absl::StrCat("--weight_decay=", absl::GetFlag(FLAGS_weight_decay)),
          absl::StrCat("--warmup_steps=", absl::GetFlag(FLAGS_warmup_steps)),
          absl::StrCat("--lr_schedule=", absl::GetFlag(FLAGS_lr_schedule)),
          absl::StrCat("--device=", absl::GetFlag(FLAGS_device)),
          absl::StrCat("--device_step_ms=", absl::GetFlag(FLAGS_device_step_ms)),
          absl::StrCat("--precision=", absl::GetFlag(FLAGS_precision)),
          absl::StrCat("--bucket_mb=", absl::GetFlag(FLAGS_bucket_mb)),
          absl::StrCat("--memory_format=", absl::GetFlag(FLAGS_memory_format)),
          absl::StrCat("--checkpoint_dir=", absl::GetFlag(FLAGS_checkpoint_dir)),
          absl::StrCat("--checkpoint_every=", absl::GetFlag(FLAGS_checkpoint_every)),
          absl::StrCat("--resume=", absl::GetFlag(FLAGS_resume) ? "true" : "false"),
          absl::StrCat("--model_dir=", absl::GetFlag(FLAGS_model_dir)),
          absl::StrCat("--pipeline=", absl::GetFlag(FLAGS_pipeline)),
          absl::StrCat("--pixel_channel=", absl::GetFlag(FLAGS_pixel_channel) ? "true" : "false"),
          absl::StrCat("--connect_timeout=",
                       absl::FormatDuration(absl::GetFlag(FLAGS_connect_timeout))),
          absl::StrCat("--metrics_file=", absl::GetFlag(FLAGS_metrics_file)),
          absl::StrCat("--max_failed_fraction=", absl::GetFlag(FLAGS_max_failed_fraction)),
          absl::StrCat("--sample_log_dir=", absl::GetFlag(FLAGS_sample_log_dir)),
          absl::StrCat("--auth_token_file=", absl::GetFlag(FLAGS_auth_token_file)),
          absl::StrCat("--tls_cert=", absl::GetFlag(FLAGS_tls_cert)),
          absl::StrCat("--tls_key=", absl::GetFlag(FLAGS_tls_key)),
          absl::StrCat("--tls_ca=", absl::GetFlag(FLAGS_tls_ca)),
          absl::StrCat("--tls_server_name=", absl::GetFlag(FLAGS_tls_server_name)),
          absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))};
}

TlsConfig TlsFromFlags() {
  TlsConfig tls;
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  return tls;
}

absl::StatusOr<std::string> AuthTokenFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_auth_token_file);
  if (path.empty()) {
    return std::string();
  }
  return ReadAuthTokenFile(path);
}

std::string PythonFlagOr(const std::string& fallback) {
  const std::string python = absl::GetFlag(FLAGS_python);
  return python.empty() ? fallback : python;
}

}  // namespace heterodl
