// Command-line flags of the heterodl launcher, shared by its commands. Each
// command turns them into the options struct of the library it runs; no
// library reads flags.
#ifndef HETERODL_LAUNCHER_FLAGS_H_
#define HETERODL_LAUNCHER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/common/net/tls_config.h"

// Data and pipeline.
ABSL_DECLARE_FLAG(std::string, dataset);
ABSL_DECLARE_FLAG(std::string, python_dataset);
ABSL_DECLARE_FLAG(std::vector<std::string>, python_path);
ABSL_DECLARE_FLAG(int32_t, python_workers);
ABSL_DECLARE_FLAG(std::string, python);
ABSL_DECLARE_FLAG(absl::Duration, python_sample_timeout);
ABSL_DECLARE_FLAG(std::string, pipeline);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(uint32_t, shuffle_block_shards);
ABSL_DECLARE_FLAG(int32_t, batch_size);
// Server.
ABSL_DECLARE_FLAG(std::string, address);
ABSL_DECLARE_FLAG(int32_t, port);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(int32_t, metrics_port);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(int32_t, worker_nice);
ABSL_DECLARE_FLAG(int64_t, max_pixels);
ABSL_DECLARE_FLAG(int64_t, max_file_mb);
ABSL_DECLARE_FLAG(std::string, s3_endpoint);
ABSL_DECLARE_FLAG(std::string, s3_region);
ABSL_DECLARE_FLAG(std::string, s3_addressing);
ABSL_DECLARE_FLAG(bool, s3_no_sign);
ABSL_DECLARE_FLAG(std::string, cache_dir);
ABSL_DECLARE_FLAG(int64_t, cache_mb);
ABSL_DECLARE_FLAG(int64_t, read_chunk_mb);
ABSL_DECLARE_FLAG(int64_t, chunk_memory_mb);
ABSL_DECLARE_FLAG(std::string, tfrecord_image_key);
ABSL_DECLARE_FLAG(std::string, tfrecord_label_key);
ABSL_DECLARE_FLAG(int64_t, tfrecord_label_offset);
ABSL_DECLARE_FLAG(std::string, tfrecord_mask_key);
ABSL_DECLARE_FLAG(std::string, dataset_root);
ABSL_DECLARE_FLAG(std::string, image_root);
ABSL_DECLARE_FLAG(double, min_box_visibility);
ABSL_DECLARE_FLAG(bool, strict_decode);
ABSL_DECLARE_FLAG(int32_t, ignore_index);
ABSL_DECLARE_FLAG(bool, strict_dataset);
ABSL_DECLARE_FLAG(int64_t, synthetic);
ABSL_DECLARE_FLAG(std::string, auth_token_file);
ABSL_DECLARE_FLAG(int32_t, max_streams);
ABSL_DECLARE_FLAG(int64_t, max_stream_mb);
ABSL_DECLARE_FLAG(int32_t, max_streams_per_host);
ABSL_DECLARE_FLAG(int64_t, max_memory_mb);
ABSL_DECLARE_FLAG(absl::Duration, unread_timeout);
ABSL_DECLARE_FLAG(int64_t, max_pipeline_cost);
ABSL_DECLARE_FLAG(int32_t, pixel_port);
ABSL_DECLARE_FLAG(bool, same_host_pixels);
ABSL_DECLARE_FLAG(bool, pixel_channel);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(absl::Duration, idle_timeout);
ABSL_DECLARE_FLAG(absl::Duration, startup_timeout);
// Trainer.
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(int64_t, steps);
ABSL_DECLARE_FLAG(int32_t, epochs);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(int64_t, warmup_steps);
ABSL_DECLARE_FLAG(std::string, lr_schedule);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(double, device_step_ms);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(double, bucket_mb);
ABSL_DECLARE_FLAG(std::string, memory_format);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(bool, resume);
ABSL_DECLARE_FLAG(std::string, model_dir);
ABSL_DECLARE_FLAG(int32_t, local_rank);
ABSL_DECLARE_FLAG(int32_t, ranks);
ABSL_DECLARE_FLAG(int32_t, servers);
ABSL_DECLARE_FLAG(int32_t, rank);
ABSL_DECLARE_FLAG(int32_t, world_size);
ABSL_DECLARE_FLAG(std::string, master_addr);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);
ABSL_DECLARE_FLAG(double, max_failed_fraction);
ABSL_DECLARE_FLAG(std::string, metrics_file);
ABSL_DECLARE_FLAG(std::string, sample_log_dir);
// Cluster view (also HETERODL_* variables).
ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(std::string, data_servers);
ABSL_DECLARE_FLAG(std::string, data_servers_file);
ABSL_DECLARE_FLAG(std::string, data_servers_dns);
ABSL_DECLARE_FLAG(std::string, dnn_hosts);
ABSL_DECLARE_FLAG(std::string, current_host);
ABSL_DECLARE_FLAG(int32_t, ranks_per_host);
ABSL_DECLARE_FLAG(int32_t, master_port);
ABSL_DECLARE_FLAG(std::string, resource_config);
ABSL_DECLARE_FLAG(std::string, data_group);
ABSL_DECLARE_FLAG(std::string, dnn_group);
ABSL_DECLARE_FLAG(int32_t, slurm_data_component);
// Output.
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(double, max_stall);
ABSL_DECLARE_FLAG(double, demand);
ABSL_DECLARE_FLAG(std::string, prices);
ABSL_DECLARE_FLAG(std::string, gpu_instance);
ABSL_DECLARE_FLAG(std::vector<std::string>, data_instance);
ABSL_DECLARE_FLAG(int32_t, images);
ABSL_DECLARE_FLAG(std::string, formats);
ABSL_DECLARE_FLAG(std::string, task);
ABSL_DECLARE_FLAG(std::string, sample_size);
ABSL_DECLARE_FLAG(bool, overwrite);
ABSL_DECLARE_FLAG(std::string, source_photos);
ABSL_DECLARE_FLAG(std::string, log_level);

namespace heterodl {

// The training flags (model, steps, epochs, batch size, seed, learning rate,
// pipeline, connect timeout, metrics file, sample log dir, auth token file,
// TLS, log level) as "--name=value" arguments, for the processes `local`
// and `train` start.
std::vector<std::string> TrainingFlagsAsArguments();

// The token of --auth-token-file, or "" when none is given. Errors name the
// file.
absl::StatusOr<std::string> AuthTokenFromFlags();
// --tls-cert, --tls-key, --tls-ca, --tls-server-name.
TlsConfig TlsFromFlags();

// --python, or `fallback` when it is not given (each command has its own).
std::string PythonFlagOr(const std::string& fallback);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_FLAGS_H_
