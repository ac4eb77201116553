// The trainer's parts: data-parallel gradient averaging against one process
// on the union of the batches, models, learning-rate schedule, checkpoints.
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "src/common/net/host_port.h"
#include "src/train/checkpoint.h"
#include "src/train/communicator.h"
#include "src/train/gradient_reducer.h"
#include "src/train/lr_schedule.h"
#include "src/train/metrics_writer.h"
#include "src/train/models.h"

namespace heterodl {
namespace {

// A rendezvous port; the test fails here if there is none.
int FreePort() {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(1);
}

torch::nn::Sequential Mlp() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 4));
}

constexpr int kSteps = 3;
constexpr int kBatch = 12;

// Trains `model` for kSteps on rows [begin, end) of the fixed data; with a
// reducer, gradients are averaged across ranks first.
void Train(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& y,
           int64_t begin, int64_t end, GradientReducer* reducer) {
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(x.slice(0, begin, end)), y.slice(0, begin, end));
    loss.backward();
    if (reducer != nullptr) {
      ASSERT_TRUE(reducer->FinishStep().ok());
    }
    optimizer.step();
  }
}

class DataParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelTest, RanksEndWithTheParametersOfOneRankOnTheUnion) {
  const int world_size = GetParam();
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({kBatch, 8});
  const torch::Tensor y = torch::randint(0, 4, {kBatch});

  torch::nn::Sequential reference = Mlp();
  Train(reference, x, y, 0, kBatch, nullptr);

  std::vector<torch::nn::Sequential> replicas;
  replicas.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    replicas.push_back(Mlp());
  }
  const int port = FreePort();
  std::vector<int> started_in_backward(world_size);
  std::vector<int> buckets(world_size);
  std::vector<std::thread> ranks;
  ranks.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    ranks.emplace_back([&, rank] {
      RendezvousOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.master_port = port;
      options.local_hostname = "127.0.0.1";
      options.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> communicator = CreateCommunicator(options);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      // 64-byte buckets: one per parameter tensor, so several all-reduces
      // are in flight and must start in the same order everywhere.
      GradientReducer reducer(replicas[rank]->parameters(), **communicator, 64);
      const int64_t share = kBatch / world_size;
      Train(replicas[rank], x, y, rank * share, (rank + 1) * share, &reducer);
      started_in_backward[rank] = reducer.buckets_started_in_backward();
      buckets[rank] = reducer.num_buckets();
    });
  }
  for (std::thread& rank : ranks) {
    rank.join();
  }

  const std::vector<torch::Tensor> expected = reference->parameters();
  for (int rank = 0; rank < world_size; ++rank) {
    const std::vector<torch::Tensor> actual = replicas[rank]->parameters();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(actual[i], expected[i], 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i << "\n"
          << (actual[i] - expected[i]).abs().max();
    }
    EXPECT_EQ(buckets[rank], 4);
    // Every bucket was launched by a hook, during backward.
    EXPECT_EQ(started_in_backward[rank], 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelTest, ::testing::Values(1, 2, 3));

TEST(GradientReducerTest, AParameterWithoutGradientGetsZerosOnEveryRank) {
  RendezvousOptions options;
  options.master_port = FreePort();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator = CreateCommunicator(options);
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  torch::nn::Linear used(4, 2);
  torch::nn::Linear unused(4, 2);
  std::vector<torch::Tensor> parameters = used->parameters();
  for (const torch::Tensor& p : unused->parameters()) {
    parameters.push_back(p);
  }
  GradientReducer reducer(parameters, **communicator, 1 << 20);
  used->forward(torch::ones({3, 4})).sum().backward();
  ASSERT_TRUE(reducer.FinishStep().ok());
  EXPECT_TRUE(unused->weight.grad().defined());
  EXPECT_EQ(unused->weight.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_GT(used->weight.grad().abs().sum().item<float>(), 0.0f);
}

TEST(LrScheduleTest, WarmupThenCosineToZero) {
  const LrSchedule schedule{0.1, 10, 110, LrSchedule::Kind::kCosine};
  EXPECT_DOUBLE_EQ(schedule.At(0), 0.01);
  EXPECT_DOUBLE_EQ(schedule.At(9), 0.1);
  EXPECT_DOUBLE_EQ(schedule.At(10), 0.1);
  EXPECT_NEAR(schedule.At(60), 0.05, 1e-12);
  EXPECT_NEAR(schedule.At(110), 0.0, 1e-12);
  EXPECT_NEAR(schedule.At(500), 0.0, 1e-12);
  const LrSchedule constant{0.1, 0, 100, LrSchedule::Kind::kConstant};
  EXPECT_DOUBLE_EQ(constant.At(99), 0.1);
  EXPECT_FALSE(ParseLrScheduleKind("step").ok());
}

int64_t CountParameters(Model& model) {
  int64_t count = 0;
  for (const torch::Tensor& p : model.Parameters()) {
    count += p.numel();
  }
  return count;
}

TEST(ModelsTest, ResNetsHaveTorchvisionsParameterCountsAndShapes) {
  // torchvision.models.resnet18() / resnet50(): 11,689,512 / 25,557,032.
  absl::StatusOr<std::unique_ptr<Model>> resnet18 = CreateModel("resnet18", 1000);
  ASSERT_TRUE(resnet18.ok());
  EXPECT_EQ(CountParameters(**resnet18), 11'689'512);
  absl::StatusOr<std::unique_ptr<Model>> resnet50 = CreateModel("resnet50", 1000);
  ASSERT_TRUE(resnet50.ok());
  EXPECT_EQ(CountParameters(**resnet50), 25'557'032);
  // 2 running statistics + a batch counter per batch norm layer: 53 in ResNet-50.
  EXPECT_EQ((*resnet50)->Buffers().size(), 53u * 3);
  torch::NoGradGuard no_grad;
  (*resnet50)->SetTraining(false);
  EXPECT_EQ((*resnet50)->Forward(torch::zeros({2, 3, 64, 64})).sizes(),
            (std::vector<int64_t>{2, 1000}));
  absl::StatusOr<std::unique_ptr<Model>> small = CreateModel("small_cnn", 5);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->Forward(torch::zeros({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 5}));
}

TEST(ModelsTest, ChannelsLastChangesTheLayoutNotTheModel) {
  torch::manual_seed(7);
  std::unique_ptr<Model> model = *CreateModel("resnet18", 10);
  model->SetTraining(false);
  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::rand({2, 3, 48, 48});
  const torch::Tensor before = model->Forward(input);
  const size_t parameters = model->Parameters().size();
  ToChannelsLast(*model);
  EXPECT_EQ(model->Parameters().size(), parameters);
  int converted = 0;
  for (const torch::Tensor& parameter : model->Parameters()) {
    if (parameter.dim() != 4) {
      continue;
    }
    EXPECT_TRUE(parameter.is_contiguous(torch::MemoryFormat::ChannelsLast));
    ++converted;
  }
  EXPECT_EQ(converted, 20);  // ResNet-18's convolutions, downsampling ones included
  const torch::Tensor after = model->Forward(input.contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(before, after, 1e-4, 1e-5))
      << (before - after).abs().max().item<double>();
}

TEST(ModelsTest, UnknownNamesAndBadTorchScriptFilesAreClearErrors) {
  absl::StatusOr<std::unique_ptr<Model>> unknown = CreateModel("resnet1000", 10);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("resnet18"), std::string::npos);
  const std::filesystem::path garbage =
      std::filesystem::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") /
      "not_a_model.pt";
  std::ofstream(garbage) << "this is not a zip archive";
  absl::StatusOr<std::unique_ptr<Model>> bad = CreateModel(garbage.string(), 10);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("TorchScript"), std::string::npos);
  EXPECT_FALSE(CreateModel("small_cnn", 0).ok());
}

TEST(CheckpointTest, RestoresModelOptimizerAndPosition) {
  // A fresh directory per run: std::filesystem::remove_all must not be called
  // where libtorch.so is loaded (it exports a broken copy; docs/architecture.md).
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = (std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
                           ("checkpoint_test_" + std::to_string(getpid())))
                              .string();
  torch::manual_seed(3);
  std::unique_ptr<Model> model = *CreateModel("small_cnn", 4);
  torch::optim::SGD optimizer(model->Parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  optimizer.zero_grad();
  torch::nn::functional::cross_entropy(model->Forward(torch::randn({4, 3, 16, 16})),
                                       torch::tensor({0, 1, 2, 3}))
      .backward();
  optimizer.step();
  TrainingState saved{17, 2, 5};
  saved.world_size = 3;
  saved.batch_size = 8;
  saved.epoch_offset = 120;
  saved.first_batch = 4;
  saved.dataset_fingerprint = 0xfedcba9876543210;  // over int64's range: kept bit for bit
  saved.seed = 42;
  saved.drop_last = true;
  saved.shuffle = false;
  saved.shuffle_block_shards = 4;
  ASSERT_TRUE(SaveCheckpoint(dir, *model, optimizer, saved).ok());

  torch::manual_seed(4);  // different initial weights
  std::unique_ptr<Model> restored = *CreateModel("small_cnn", 4);
  torch::optim::SGD restored_optimizer(restored->Parameters(),
                                       torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<std::optional<TrainingState>> state =
      LoadCheckpoint(dir, *restored, restored_optimizer);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(state->has_value());
  EXPECT_EQ((*state)->step, 17);
  EXPECT_EQ((*state)->epoch, 2u);
  EXPECT_EQ((*state)->next_batch, 5);
  EXPECT_EQ((*state)->world_size, 3u);
  EXPECT_EQ((*state)->batch_size, 8u);
  EXPECT_EQ((*state)->epoch_offset, 120u);
  EXPECT_EQ((*state)->first_batch, 4);
  EXPECT_EQ((*state)->dataset_fingerprint, 0xfedcba9876543210);
  EXPECT_EQ((*state)->seed, 42u);
  EXPECT_TRUE((*state)->drop_last);
  EXPECT_FALSE((*state)->shuffle);
  EXPECT_EQ((*state)->shuffle_block_shards, 4u);
  for (size_t i = 0; i < model->Parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(model->Parameters()[i], restored->Parameters()[i]));
  }
  for (size_t i = 0; i < model->Buffers().size(); ++i) {
    EXPECT_TRUE(torch::equal(model->Buffers()[i], restored->Buffers()[i]));
  }
  // The same next step from both: the momentum buffers came back too.
  const torch::Tensor input = torch::randn({4, 3, 16, 16});
  for (auto [m, o] : {std::pair<Model*, torch::optim::SGD*>{model.get(), &optimizer},
                      {restored.get(), &restored_optimizer}}) {
    o->zero_grad();
    torch::nn::functional::cross_entropy(m->Forward(input), torch::tensor({3, 2, 1, 0})).backward();
    o->step();
  }
  for (size_t i = 0; i < model->Parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(model->Parameters()[i], restored->Parameters()[i]));
  }

  // No checkpoint: nothing to resume. Another model: a clear error.
  EXPECT_FALSE(LoadCheckpoint(dir + "/none", *restored, restored_optimizer)->has_value());
  std::unique_ptr<Model> other = *CreateModel("small_cnn", 7);
  torch::optim::SGD other_optimizer(other->Parameters(), torch::optim::SGDOptions(0.1));
  absl::StatusOr<std::optional<TrainingState>> mismatch =
      LoadCheckpoint(dir, *other, other_optimizer);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("shape"), std::string::npos);
}

TEST(MetricsWriterTest, AWriteThatFailsIsSaidOnceAndTrainingGoesOn) {
  // /dev/full accepts the open and refuses every write (ENOSPC).
  absl::StatusOr<std::unique_ptr<MetricsWriter>> writer = MetricsWriter::Open("/dev/full", 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepRecord record;
  record.batch_size = 8;
  record.step_ms = 10;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    (*writer)->RecordStep(record);
  }
  EXPECT_FALSE((*writer)->WriteSummary((*writer)->totals(), 1, 1.0).empty());
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ((*writer)->totals().steps, 3u);  // still counted
  EXPECT_EQ((*writer)->totals().images, 24u);
  size_t times = 0;
  for (size_t at = said.find("write failed"); at != std::string::npos;
       at = said.find("write failed", at + 1)) {
    ++times;
  }
  EXPECT_EQ(times, 1u) << said;
  EXPECT_NE(said.find("/dev/full"), std::string::npos) << said;
}

}  // namespace
}  // namespace heterodl
