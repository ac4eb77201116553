#include "src/sizing/cluster_sizing.h"

#include <cmath>

#include "gtest/gtest.h"
#include "src/common/read_file.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

PriceTable Prices() {
  absl::StatusOr<PriceTable> prices = PriceTable::Load(HETERODL_PRICES_CSV);
  EXPECT_TRUE(prices.ok()) << prices.status();
  return *prices;
}

TEST(PriceTableTest, ThePublishedComparisonsComeOutOfTheTable) {
  const PriceTable prices = Prices();
  const v1::InstanceType p4d = *prices.Find("ml.p4d.24xlarge");
  const v1::InstanceType c5_18 = *prices.Find("ml.c5.18xlarge");
  const v1::InstanceType p3 = *prices.Find("ml.p3.2xlarge");
  const v1::InstanceType c5_9 = *prices.Find("ml.c5.9xlarge");
  // TensorFlow: 192 ms alone, 86 ms with 2 x c5.18xlarge ($45.032/h): 46%.
  const v1::ClusterEstimate tf_homo = PriceMeasured(p4d, nullptr, 0, 192);
  const v1::ClusterEstimate tf_hetero = PriceMeasured(p4d, &c5_18, 2, 86);
  EXPECT_NEAR(tf_hetero.usd_per_hour(), 45.032, 1e-9);
  EXPECT_NEAR(1 - tf_hetero.usd_per_step() / tf_homo.usd_per_step(), 0.46, 0.005);
  // PyTorch: 1,193 ms alone, 184 ms with 1 x c5.9xlarge ($5.661/h): 77%.
  const v1::ClusterEstimate pt_homo = PriceMeasured(p3, nullptr, 0, 1193);
  const v1::ClusterEstimate pt_hetero = PriceMeasured(p3, &c5_9, 1, 184);
  EXPECT_NEAR(pt_hetero.usd_per_hour(), 5.661, 1e-9);
  EXPECT_NEAR(1 - pt_hetero.usd_per_step() / pt_homo.usd_per_step(), 0.77, 0.005);
}

TEST(PriceTableTest, BadRowsNameTheLine) {
  absl::StatusOr<PriceTable> bad =
      PriceTable::Parse("# c\nml.x,8,1,3.8,10\nml.y,8,one,3,10\n", "t.csv");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("t.csv:3"), std::string::npos);
  EXPECT_FALSE(PriceTable::Parse("# only comments\n", "t.csv").ok());
  EXPECT_NE(Prices().Find("ml.nope").status().message().find("ml.p3.2xlarge"), std::string::npos);
}

Workload Resnet50OnP3() {
  Workload workload;
  workload.device_step_ms = 180;  // a V100's ResNet-50 step at batch 256
  workload.batch_per_gpu = 256;
  workload.images_per_sec_per_core = 100;  // a slow Python pipeline
  return workload;
}

TEST(PlannerTest, ACpuBoundGpuInstanceGetsTheCheapestDataGroupThatRemovesTheStall) {
  PlanRequest request;
  request.gpu_instance = "ml.p3.2xlarge";
  absl::StatusOr<v1::SizingReport> plan = SizeCluster(Resnet50OnP3(), Prices(), request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 7 vCPUs x 100/s = 700 images/s for 256 per step: 366 ms, CPU-bound.
  EXPECT_EQ(plan->homogeneous().bound(), "cpu");
  EXPECT_NEAR(plan->homogeneous().step_ms(), 256 / 700.0 * 1000, 1e-6);
  const v1::ClusterEstimate& best = plan->recommended();
  EXPECT_GT(best.data_instances(), 0u);
  EXPECT_LE(best.data_stall(), 0.05);
  EXPECT_GT(best.price_performance_improvement(), 0);
  for (const v1::ClusterEstimate& other : plan->considered()) {
    if (other.data_stall() <= 0.05) {
      EXPECT_GE(other.usd_per_step(), best.usd_per_step() - 1e-12);
    }
  }
  EXPECT_NE(plan->reason().find("cpu-bound"), std::string::npos);
}

TEST(PlannerTest, AGpuBoundInstanceStaysHomogeneous) {
  Workload workload = Resnet50OnP3();
  workload.images_per_sec_per_core = 2000;  // heterodl's decoder: 14,000/s on 7 vCPUs
  PlanRequest request;
  request.gpu_instance = "ml.p3.2xlarge";
  absl::StatusOr<v1::SizingReport> plan = SizeCluster(workload, Prices(), request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->homogeneous().bound(), "gpu");
  EXPECT_EQ(plan->recommended().data_instances(), 0u);
  EXPECT_NE(plan->reason().find("only adds cost"), std::string::npos);
}

TEST(PlannerTest, TheNetworkBoundIsNamed) {
  Workload workload = Resnet50OnP3();
  workload.device_step_ms = 20;
  workload.image_bytes = 512 * 512 * 3;  // big images, a fast accelerator
  PlanRequest request;
  request.gpu_instance = "ml.p3.2xlarge";
  request.data_instances = {"ml.c5.9xlarge"};
  request.max_data_stall = 0.01;
  absl::StatusOr<v1::SizingReport> plan = SizeCluster(workload, Prices(), request);
  ASSERT_TRUE(plan.ok());
  // 230 ms to move 256 x 786 kB over 10 Gb/s at 70%; decoding would take 71.
  EXPECT_EQ(plan->recommended().bound(), "network");
  EXPECT_EQ(plan->considered().size(), 1u);  // a second instance cannot help
  EXPECT_NE(plan->reason().find("network"), std::string::npos);
}

TEST(PriceTableTest, SpotPricesAreAnOptionalSixthColumn) {
  ASSERT_OK_AND_ASSIGN(PriceTable table,
                       PriceTable::Parse("a,8,0,1.0,10,0.4\nb,8,0,1.0,10,\nc,8,0,1,10\n", "t"));
  EXPECT_DOUBLE_EQ(table.Find("a")->spot_usd_per_hour(), 0.4);
  EXPECT_DOUBLE_EQ(table.Find("b")->spot_usd_per_hour(), 0);  // none known
  EXPECT_DOUBLE_EQ(table.Find("c")->spot_usd_per_hour(), 0);
  EXPECT_FALSE(PriceTable::Parse("a,8,0,1.0,10,-1\n", "t").ok());
  EXPECT_FALSE(PriceTable::Parse("a,8,0,1.0,10,0.4,9\n", "t").ok());
  // The shipped table's spot rows: cheaper than on demand, each of them.
  int spot_rows = 0;
  const PriceTable shipped = Prices();
  for (const v1::InstanceType& type : shipped.instances()) {
    if (type.spot_usd_per_hour() == 0) {
      continue;
    }
    ++spot_rows;
    EXPECT_LT(type.spot_usd_per_hour(), type.usd_per_hour()) << type.name();
  }
  EXPECT_GE(spot_rows, 5);
}

TEST(PlannerTest, SpotDataHostsArePricedAtSpotAndCountedLessTheInterruptions) {
  const PriceTable prices = Prices();
  const v1::InstanceType gpu = *prices.Find("ml.p3.2xlarge");
  const v1::InstanceType c5 = *prices.Find("c5.12xlarge");
  const Workload workload = Resnet50OnP3();
  const v1::ClusterEstimate on_demand = Estimate(workload, gpu, &c5, 1);
  const v1::ClusterEstimate spot = Estimate(workload, gpu, &c5, 1, {true, 0.2});
  EXPECT_FALSE(on_demand.data_spot());
  EXPECT_TRUE(spot.data_spot());
  EXPECT_NEAR(spot.usd_per_hour(), gpu.usd_per_hour() + c5.spot_usd_per_hour(), 1e-9);
  // 48 vCPUs x 100/s, a fifth of it lost: 3,840/s for 256 images.
  EXPECT_NEAR(spot.step_ms(), std::max(180.0, 256 / 3840.0 * 1000), 1e-9);
  EXPECT_NE(ShapeName(spot).find("(spot)"), std::string::npos);

  PlanRequest request;
  request.gpu_instance = "ml.p3.2xlarge";
  request.data_instances = {"c5.4xlarge", "c5.12xlarge", "ml.c5.9xlarge"};
  ASSERT_OK_AND_ASSIGN(v1::SizingReport without, SizeCluster(workload, prices, request));
  request.spot = true;
  ASSERT_OK_AND_ASSIGN(v1::SizingReport with, SizeCluster(workload, prices, request));
  EXPECT_TRUE(with.recommended().data_spot());
  EXPECT_LT(with.recommended().usd_per_step(), without.recommended().usd_per_step());
  EXPECT_LE(with.recommended().data_stall(), 0.05);
  // Every on-demand shape is still there beside the spot ones; the ml.*
  // type has no spot price, so no spot shape of it.
  EXPECT_GT(with.considered().size(), without.considered().size());
  for (const v1::ClusterEstimate& shape : with.considered()) {
    EXPECT_FALSE(shape.data_spot() && shape.data_instance() == "ml.c5.9xlarge");
  }
  EXPECT_NE(with.reason().find("95%"), std::string::npos);
  request.interruption_overhead = 1.0;
  EXPECT_FALSE(SizeCluster(workload, prices, request).ok());
}

TEST(PlannerTest, BySageMakerGpusOnlySageMakerDataTypesAreConsidered) {
  PlanRequest request;
  request.gpu_instance = "ml.p3.2xlarge";
  ASSERT_OK_AND_ASSIGN(v1::SizingReport plan, SizeCluster(Resnet50OnP3(), Prices(), request));
  for (const v1::ClusterEstimate& shape : plan.considered()) {
    EXPECT_EQ(shape.data_instance().rfind("ml.", 0), 0u) << shape.data_instance();
  }
}

TEST(PlannerTest, NonsenseIsRefused) {
  PlanRequest request;
  request.gpu_instance = "ml.c5.9xlarge";
  EXPECT_EQ(SizeCluster(Resnet50OnP3(), Prices(), request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.gpu_instance = "ml.p3.2xlarge";
  Workload zero = Resnet50OnP3();
  zero.images_per_sec_per_core = 0;
  EXPECT_FALSE(SizeCluster(zero, Prices(), request).ok());
}

TEST(DataGroupSizingTest, HostsFollowTheDecodeBound) {
  // 9,000 images/s wanted, hosts building 2,000: 5% stall allows 8,550/s.
  ASSERT_OK_AND_ASSIGN(int hosts, DataHostsNeeded(9000, 2000, 0.05));
  EXPECT_EQ(hosts, 5);
  ASSERT_OK_AND_ASSIGN(hosts, DataHostsNeeded(9000, 2000, 0.0));
  EXPECT_EQ(hosts, 5);  // 4.5 hosts: five
  ASSERT_OK_AND_ASSIGN(hosts, DataHostsNeeded(8000, 2000, 0.0));
  EXPECT_EQ(hosts, 4);  // exactly four, not five from rounding
  ASSERT_OK_AND_ASSIGN(hosts, DataHostsNeeded(100, 2000, 0.05));
  EXPECT_EQ(hosts, 1);  // never none
  ASSERT_OK_AND_ASSIGN(hosts, DataHostsNeeded(9000, 2000, 0.5));
  EXPECT_EQ(hosts, 3);  // half the steps waiting: 4,500/s is enough
}

TEST(DataGroupSizingTest, NonsenseIsRefused) {
  EXPECT_FALSE(DataHostsNeeded(0, 2000, 0.05).ok());
  EXPECT_FALSE(DataHostsNeeded(9000, 0, 0.05).ok());
  EXPECT_FALSE(DataHostsNeeded(9000, 2000, 1.0).ok());
  EXPECT_FALSE(DataHostsNeeded(9000, 2000, -0.1).ok());
  EXPECT_FALSE(DataHostsNeeded(std::nan(""), 2000, 0.05).ok());
}

}  // namespace
}  // namespace heterodl
