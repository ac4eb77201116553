// "flags -> options" for `train` (the rank's TrainerOptions) and `local`:
// pure functions of the flags, set in-process (restored by FlagSaver).
#include "launcher/trainer_flags.h"

#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

template <typename T>
void ExpectUsageError(const absl::StatusOr<T>& result, const std::string& words) {
  ASSERT_FALSE(result.ok()) << "expected: " << words;
  EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
  EXPECT_NE(result.status().message().find(words), std::string::npos) << result.status();
}

TEST(TrainerFlagsTest, FlagsBecomeTheRanksComposedOptions) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_data_servers, "algo-2:50051,algo-3:50051");
  absl::SetFlag(&FLAGS_data_servers_file, "/shared/servers");
  absl::SetFlag(&FLAGS_data_servers_dns, "data:50051");
  absl::SetFlag(&FLAGS_batch_size, 64);
  absl::SetFlag(&FLAGS_seed, uint64_t{7});
  absl::SetFlag(&FLAGS_pixel_channel, false);
  absl::SetFlag(&FLAGS_rank, 3);
  absl::SetFlag(&FLAGS_world_size, 4);
  absl::SetFlag(&FLAGS_master_addr, "algo-1");
  absl::SetFlag(&FLAGS_master_port, 29600);
  absl::SetFlag(&FLAGS_connect_timeout, absl::Seconds(90));
  absl::SetFlag(&FLAGS_optimizer, "adamw");
  absl::SetFlag(&FLAGS_lr, 0.001);
  absl::SetFlag(&FLAGS_warmup_steps, int64_t{100});
  absl::SetFlag(&FLAGS_lr_schedule, "constant");
  absl::SetFlag(&FLAGS_device, "cpu");
  absl::SetFlag(&FLAGS_precision, "bf16");
  absl::SetFlag(&FLAGS_memory_format, "channels_last");
  absl::SetFlag(&FLAGS_bucket_mb, 2.0);
  absl::SetFlag(&FLAGS_metrics_file, "/tmp/metrics.jsonl");
  absl::SetFlag(&FLAGS_metrics_port, 9401);
  ASSERT_OK_AND_ASSIGN(const TrainerOptions options, TrainerOptionsFromFlags());

  EXPECT_EQ(options.data.servers.fixed, (std::vector<std::string>{"algo-2:50051", "algo-3:50051"}));
  EXPECT_EQ(options.data.servers.servers_file, "/shared/servers");
  EXPECT_EQ(options.data.servers.dns_name, "data:50051");
  EXPECT_EQ(options.data.batch_size, 64u);
  EXPECT_EQ(options.data.seed, 7u);
  EXPECT_FALSE(options.data.pixel_channel);
  EXPECT_EQ(options.data.connect_timeout, absl::Seconds(90));

  EXPECT_EQ(options.rendezvous.rank, 3);
  EXPECT_EQ(options.rendezvous.world_size, 4);
  EXPECT_EQ(options.rendezvous.master_addr, "algo-1");
  EXPECT_EQ(options.rendezvous.master_port, 29600);
  EXPECT_EQ(options.rendezvous.timeout, absl::Seconds(90));

  EXPECT_EQ(options.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(options.optimizer.learning_rate, 0.001);
  EXPECT_EQ(options.optimizer.warmup_steps, 100);
  EXPECT_EQ(options.optimizer.schedule, LrSchedule::Kind::kConstant);

  EXPECT_EQ(options.device, DeviceKind::kCpu);
  EXPECT_EQ(options.precision, Precision::kBf16);
  EXPECT_EQ(options.memory_format, MemoryFormat::kChannelsLast);
  EXPECT_EQ(options.bucket_bytes, 2 << 20);
  // One metrics file and one metrics endpoint per job: rank 0's; this is
  // rank 3.
  EXPECT_EQ(options.metrics_file, "");
  EXPECT_EQ(options.metrics_port, -1);

  absl::SetFlag(&FLAGS_rank, 0);
  ASSERT_OK_AND_ASSIGN(const TrainerOptions leader, TrainerOptionsFromFlags());
  EXPECT_EQ(leader.metrics_file, "/tmp/metrics.jsonl");
  EXPECT_EQ(leader.metrics_port, 9401);
}

TEST(TrainerFlagsTest, DefaultsAreTheDocumentedOnes) {
  absl::FlagSaver saved;
  ASSERT_OK_AND_ASSIGN(const TrainerOptions options, TrainerOptionsFromFlags());
  EXPECT_EQ(options.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(options.optimizer.schedule, LrSchedule::Kind::kCosine);
  EXPECT_EQ(options.device, DeviceKind::kAuto);
  EXPECT_EQ(options.precision, Precision::kAuto);
  EXPECT_EQ(options.memory_format, MemoryFormat::kAuto);  // channels_last on CUDA
  EXPECT_TRUE(options.data.servers.empty());
  EXPECT_EQ(options.metrics_port, -1);  // off
}

TEST(TrainerFlagsTest, EveryTextChoiceIsRefusedNamingItsFlag) {
  struct Case {
    absl::Flag<std::string>* flag;
    const char* value;
    const char* words;
  };
  for (const Case& bad : {
           Case{&FLAGS_optimizer, "lamb", "--optimizer must be one of sgd, adamw; got 'lamb'"},
           Case{&FLAGS_lr_schedule, "step", "--lr-schedule must be one of constant, cosine"},
           Case{&FLAGS_device, "tpu", "--device must be one of auto, cpu, cuda; got 'tpu'"},
           Case{&FLAGS_precision, "fp16", "--precision must be one of auto, fp32, bf16"},
           Case{&FLAGS_memory_format, "nhwc",
                "--memory-format must be one of auto, contiguous, channels_last; got 'nhwc'"},
       }) {
    absl::FlagSaver saved;
    absl::SetFlag(bad.flag, bad.value);
    ExpectUsageError(TrainerOptionsFromFlags(), bad.words);
    TrainerOptions scratch;
    EXPECT_TRUE(absl::IsInvalidArgument(ParseTrainerChoices(scratch))) << bad.value;
  }
}

TEST(LocalRunTest, FlagsBecomeTheRun) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_dataset, "/data/sample");
  absl::SetFlag(&FLAGS_servers, 3);
  absl::SetFlag(&FLAGS_ranks, 4);
  absl::SetFlag(&FLAGS_threads, 0);
  ASSERT_OK_AND_ASSIGN(const LocalRun run, LocalRunFromFlags());
  EXPECT_THAT(run.data_arguments, testing::ElementsAre("--dataset=/data/sample", "--pipeline="));
  EXPECT_EQ(run.servers, 3);
  EXPECT_EQ(run.ranks, 4);
  // The cores shared among the servers, one thread each at least.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(run.threads, std::max(1, cores / 3));
  absl::SetFlag(&FLAGS_threads, 5);
  ASSERT_OK_AND_ASSIGN(const LocalRun given, LocalRunFromFlags());
  EXPECT_EQ(given.threads, 5);
}

TEST(LocalRunTest, HowABucketIsReadGoesToEachServerOfABucketsDataset) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_dataset, "s3://bucket/train/");
  absl::SetFlag(&FLAGS_s3_endpoint, "http://127.0.0.1:9000");
  absl::SetFlag(&FLAGS_s3_addressing, "path");
  absl::SetFlag(&FLAGS_s3_no_sign, true);
  ASSERT_OK_AND_ASSIGN(const LocalRun run, LocalRunFromFlags());
  EXPECT_THAT(run.data_arguments,
              testing::ElementsAre("--dataset=s3://bucket/train/",
                                   "--pipeline=", "--s3_endpoint=http://127.0.0.1:9000",
                                   "--s3_region=", "--s3_addressing=path", "--s3_no_sign=true",
                                   "--cache_dir=", "--cache_mb=10240", "--read_chunk_mb=8",
                                   "--chunk_memory_mb=2048"));
}

TEST(LocalRunTest, APythonDatasetAndItsSettingsGoToEachServer) {
  absl::FlagSaver saved;
  absl::SetFlag(&FLAGS_python_dataset, "my_data:make");
  absl::SetFlag(&FLAGS_python_path, std::vector<std::string>{"/code", "/lib"});
  absl::SetFlag(&FLAGS_servers, 2);
  absl::SetFlag(&FLAGS_threads, 3);
  absl::SetFlag(&FLAGS_python_sample_timeout, absl::Seconds(30));
  ASSERT_OK_AND_ASSIGN(const LocalRun run, LocalRunFromFlags());
  // Workers default to the server's share of the cores (its --threads).
  EXPECT_THAT(
      run.data_arguments,
      testing::ElementsAre("--python_dataset=my_data:make", "--python_path=/code,/lib",
                           "--python_workers=3", "--python=", "--python_sample_timeout=30s"));
  absl::SetFlag(&FLAGS_python_workers, 5);
  ASSERT_OK_AND_ASSIGN(const LocalRun given, LocalRunFromFlags());
  EXPECT_EQ(given.data_arguments[2], "--python_workers=5");
}

TEST(LocalRunTest, UsageErrorsComeBeforeAnythingStarts) {
  absl::FlagSaver saved;
  ExpectUsageError(LocalRunFromFlags(), "local needs one of --dataset DIR");
  absl::SetFlag(&FLAGS_dataset, "/data/sample");
  absl::SetFlag(&FLAGS_python_dataset, "my_data:make");
  ExpectUsageError(LocalRunFromFlags(), "local needs one of --dataset DIR");
  absl::SetFlag(&FLAGS_dataset, "");
  absl::SetFlag(&FLAGS_pipeline, "hflip(0.5)");
  ExpectUsageError(LocalRunFromFlags(), "--pipeline does not apply to --python-dataset");
  absl::SetFlag(&FLAGS_pipeline, "");
  absl::SetFlag(&FLAGS_python_dataset, "");
  absl::SetFlag(&FLAGS_dataset, "/data/sample");
  absl::SetFlag(&FLAGS_data_servers, "a:1");
  ExpectUsageError(LocalRunFromFlags(), "--servers N says how many");
  absl::SetFlag(&FLAGS_data_servers, "");
  // A rank setting heterodl-trainer would refuse, refused by local itself.
  absl::SetFlag(&FLAGS_memory_format, "nhwc");
  ExpectUsageError(LocalRunFromFlags(), "--memory-format must be one of");
}

}  // namespace
}  // namespace heterodl
