#include "bench/step_bench.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "heterodl/metrics.pb.h"
#include "heterodl/sizing.pb.h"
#include "src/common/log.h"
#include "src/common/process/child_process.h"
#include "src/common/proto_json.h"
#include "src/common/read_file.h"
#include "src/common/status_macros.h"
#include "src/sizing/cluster_sizing.h"

namespace heterodl {
namespace {

constexpr char kTaskset[] = "/usr/bin/taskset";

struct RunResult {
  double step_ms = 0;
  double data_wait_ms = 0;
};

// The CPUs this process may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return cpus;
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) {
      cpus.push_back(cpu);
    }
  }
  return cpus;
}

class StepBench {
 public:
  StepBench(const StepBenchOptions& options, std::filesystem::path work)
      : options_(options), work_(std::move(work)) {}

  // A data server pinned to `cpu`; returns it and its address.
  absl::StatusOr<std::pair<ChildProcess, std::string>> StartServer(int cpu, bool synthetic) {
    const std::string port_file = (work_ / absl::StrCat("port-", next_id_++)).string();
    std::vector<std::string> argv = {kTaskset,
                                     "-c",
                                     absl::StrCat(cpu),
                                     options_.heterodl,
                                     "serve",
                                     "--address=127.0.0.1:0",
                                     absl::StrCat("--port_file=", port_file),
                                     "--threads=1",
                                     absl::StrCat("--pipeline=", options_.pipeline),
                                     "--idle_timeout=60s",
                                     "--startup_timeout=120s"};
    argv.push_back(synthetic ? "--synthetic=100000" : absl::StrCat("--dataset=", options_.dataset));
    ASSIGN_OR_RETURN(ChildProcess server, ChildProcess::Spawn(argv));
    const std::optional<int> port = AwaitPortFile(server, port_file, absl::Seconds(60));
    if (!port) {
      return absl::UnavailableError("a data server for the step benchmark did not start");
    }
    return std::make_pair(std::move(server), absl::StrCat("127.0.0.1:", *port));
  }

  // One training run: servers on `server_cpus` (each its own server; the
  // trainer's cpu for homogeneous), the trainer on `trainer_cpu`.
  absl::StatusOr<RunResult> Run(int trainer_cpu, const std::vector<int>& server_cpus,
                                bool synthetic, double device_step_ms) {
    std::vector<ChildProcess> servers;
    std::vector<std::string> addresses;
    for (int cpu : server_cpus) {
      ASSIGN_OR_RETURN(auto server, StartServer(cpu, synthetic));
      servers.push_back(std::move(server.first));
      addresses.push_back(server.second);
    }
    const std::string metrics = (work_ / absl::StrCat("metrics-", next_id_++, ".jsonl")).string();
    ASSIGN_OR_RETURN(
        ChildProcess trainer,
        ChildProcess::Spawn({kTaskset, "-c", absl::StrCat(trainer_cpu), options_.heterodl, "train",
                             absl::StrCat("--data_servers=", absl::StrJoin(addresses, ",")),
                             "--ranks=1", absl::StrCat("--steps=", options_.steps),
                             absl::StrCat("--batch_size=", options_.batch_size),
                             absl::StrCat("--pipeline=", options_.pipeline),
                             absl::StrCat("--model=", options_.model), "--device=cpu",
                             absl::StrCat("--device_step_ms=", device_step_ms),
                             absl::StrCat("--master_port=", 29400 + (getpid() % 500)),
                             absl::StrCat("--metrics_file=", metrics)}));
    const int code = trainer.Wait();
    for (ChildProcess& server : servers) {
      // The trainer told them to shut down; make sure.
      if (!server.WaitFor(absl::Seconds(10))) {
        server.Kill();
      }
    }
    if (code != 0) {
      return absl::InternalError(
          absl::StrCat("the benchmark's training run failed (exit ", code, "); its log is above"));
    }
    return Average(metrics);
  }

 private:
  absl::StatusOr<RunResult> Average(const std::string& path) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    RunResult result;
    int counted = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
      if (absl::StrContains(line, "\"summary\"")) {
        continue;
      }
      v1::StepMetrics step;
      if (!google::protobuf::util::JsonStringToMessage(std::string(line), &step).ok()) {
        return absl::DataLossError(absl::StrCat("unreadable metrics line in ", path));
      }
      if (static_cast<int>(step.step()) <= options_.warmup_steps) {
        continue;  // steps count from 1
      }
      result.step_ms += step.step_ms();
      result.data_wait_ms += step.data_wait_ms();
      ++counted;
    }
    if (counted == 0) {
      return absl::DataLossError(absl::StrCat("no steady steps in ", path));
    }
    result.step_ms /= counted;
    result.data_wait_ms /= counted;
    return result;
  }

  const StepBenchOptions& options_;
  const std::filesystem::path work_;
  int next_id_ = 0;
};

std::string FormatTable(const v1::StepBenchReport& report) {
  std::string text = absl::StrFormat(
      "step benchmark: %s, batch %d, pipeline '%s'\naccelerator: %s\ndecode + augment: %.0f "
      "images/s per core (measured)\n\n| configuration | instances | price/hour | avg step (ms) "
      "| predicted (ms) | data stall | cost per step | price-performance |\n|---|---|---|---|---|"
      "---|---|---|\n",
      report.model(), report.batch_size(), report.pipeline(), report.accelerator(),
      report.images_per_sec_per_core());
  for (const v1::StepBenchRun& run : report.runs()) {
    absl::StrAppendFormat(
        &text, "| %s | %s | $%.3f | %.1f | %.1f | %.0f%% | $%.7f | %s |\n", run.configuration(),
        ShapeName(run.priced()), run.priced().usd_per_hour(), run.measured_step_ms(),
        run.predicted_step_ms(), run.data_stall_percent(), run.priced().usd_per_step(),
        run.data_servers() == 0
            ? "baseline"
            : absl::StrFormat("%+.0f%%", 100 * run.priced().price_performance_improvement()));
  }
  absl::StrAppendFormat(&text,
                        "\nplanner vs measurement, heterogeneous: predicted %.1f ms, measured "
                        "%.1f ms (%.1f%% off)\n",
                        report.predicted_step_ms(), report.measured_step_ms(),
                        100 * report.prediction_error());
  return text;
}

absl::Status WriteReport(const v1::StepBenchReport& report, const Workload& workload,
                         const v1::InstanceType& gpu, const v1::InstanceType& data,
                         const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  // Measured points and the planner's curve, for gnuplot.
  const std::string data_path = (std::filesystem::path(dir) / "step.dat").string();
  {
    std::ofstream out(data_path);
    out << "# servers measured_ms measured_usd_per_step\n";
    for (const v1::StepBenchRun& run : report.runs()) {
      out << run.data_servers() << ' ' << run.measured_step_ms() << ' '
          << run.priced().usd_per_step() * 1e6 << '\n';
    }
    out << "\n\n# servers predicted_ms predicted_usd_per_step\n";
    for (int n = 0; n <= 8; ++n) {
      const v1::ClusterEstimate e = Estimate(workload, gpu, n == 0 ? nullptr : &data, n);
      out << n << ' ' << e.step_ms() << ' ' << e.usd_per_step() * 1e6 << '\n';
    }
    if (!out) {
      return absl::UnavailableError(absl::StrCat("cannot write ", data_path));
    }
  }
  const std::string plot = (std::filesystem::path(dir) / "step.png").string();
  const v1::StepBenchRun& homogeneous = report.runs(0);
  const std::string script = (std::filesystem::path(dir) / "step.gp").string();
  {
    std::ofstream out(script);
    out << "set terminal pngcairo size 1000,420 font 'sans,10'\n"
        << "set output '" << plot << "'\n"
        << "set multiplot layout 1,2\n"
        << "set xlabel 'data servers (0 = homogeneous)'\nset grid\n"
        << "set xrange [-0.3:8.3]\nset yrange [0:*]\nset key bottom right\n"
        << "set ylabel 'step time (ms)'\n"
        << "plot '" << data_path << "' index 1 using 1:2 with linespoints lw 2 title 'planner', "
        << "'" << data_path << "' index 0 using 1:2 with points pt 7 ps 1.5 title 'measured', "
        << homogeneous.measured_step_ms()
        << " with lines dt 2 lw 2 title 'homogeneous (measured)'\n"
        << "set ylabel 'cost per step (micro-USD)'\n"
        << "plot '" << data_path << "' index 1 using 1:3 with linespoints lw 2 title 'planner', "
        << "'" << data_path << "' index 0 using 1:3 with points pt 7 ps 1.5 title 'measured', "
        << homogeneous.priced().usd_per_step() * 1e6
        << " with lines dt 2 lw 2 title 'homogeneous (measured)'\n"
        << "unset multiplot\n";
  }
  const std::string command = absl::StrCat("gnuplot '", script, "'");
  if (std::system(command.c_str()) != 0) {
    return absl::FailedPreconditionError(
        "gnuplot failed or is missing (apt-get install gnuplot-nox)");
  }
  const std::string markdown = absl::StrCat(
      "# heterodl step benchmark\n\n", FormatTable(report),
      "\nConfigurations are priced as the instance types above: the trainer's core as one ",
      gpu.name(), ", each data server's core as one ", data.name(),
      ". The planner's curve uses the measured decode rate and device step time.\n\n",
      "![step time and cost per step against data servers](step.png)\n");
  std::ofstream out(std::filesystem::path(dir) / "report.md");
  out << markdown;
  if (!out) {
    return absl::UnavailableError(absl::StrCat("cannot write ", dir, "/report.md"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// The CPUs this process may use: at least one for the trainer, one for a
// data server; and taskset to pin them.
absl::StatusOr<std::vector<int>> CheckPrerequisites(const StepBenchOptions& options) {
  if (options.dataset.empty()) {
    return absl::InvalidArgumentError("bench step needs --dataset");
  }
  std::error_code exists_error;
  if (!std::filesystem::exists(kTaskset, exists_error)) {
    return absl::FailedPreconditionError("bench step pins processes with taskset (util-linux)");
  }
  std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) {
    return absl::FailedPreconditionError(
        "bench step needs at least 2 CPUs: one for the trainer, one for a data server");
  }
  if (options.warmup_steps >= options.steps) {
    return absl::InvalidArgumentError("--steps must exceed the warm-up steps");
  }
  return cpus;
}

// 2. The accelerator's step: the one given, or the model's real LibTorch CPU
// step on synthetic data. Says which in the report.
absl::StatusOr<double> MeasureDeviceStep(const StepBenchOptions& options, StepBench& bench,
                                         int trainer_cpu, int server_cpu,
                                         v1::StepBenchReport& report) {
  if (options.device_step_ms > 0) {
    report.set_accelerator(absl::StrFormat(
        "modelled: each step waits %.1f ms instead of running the model, with the trainer's CPU "
        "free, as while a GPU computes; the model is not run",
        options.device_step_ms));
    return options.device_step_ms;
  }
  LogInfo("bench step: measuring the LibTorch CPU step alone (synthetic data)");
  ASSIGN_OR_RETURN(RunResult compute, bench.Run(trainer_cpu, {server_cpu}, true, 0));
  report.set_accelerator(absl::StrFormat(
      "measured: a real LibTorch step of %s on CPU %d stands for the GPU (%.1f ms alone); "
      "unlike a GPU it needs the host CPU, so homogeneous decoding takes turns with it",
      options.model, trainer_cpu, compute.step_ms));
  return compute.step_ms;
}

// This machine as the planner sees it: the trainer's core as the GPU
// instance, one core per data server, loopback between them.
struct LocalShape {
  Workload workload;
  v1::InstanceType gpu;
  v1::InstanceType data;
};

LocalShape LocalShapeOf(const StepBenchOptions& options, double device_step_ms,
                        double images_per_sec_per_core, const v1::InstanceType& gpu_type,
                        const v1::InstanceType& data_type) {
  LocalShape shape;
  shape.workload.device_step_ms = device_step_ms;
  shape.workload.batch_per_gpu = options.batch_size;
  shape.workload.images_per_sec_per_core = images_per_sec_per_core;
  shape.workload.trainer_vcpus_per_gpu = 0;
  shape.workload.device_uses_host_cpu = options.device_step_ms <= 0;
  shape.gpu = gpu_type;
  shape.gpu.set_vcpus(1);
  shape.gpu.set_gpus(1);
  shape.gpu.set_network_gbps(1000);
  shape.data = data_type;
  shape.data.set_vcpus(1);
  shape.data.set_network_gbps(1000);
  return shape;
}

// 3. Homogeneous (a server on the trainer's core), then 1..max_servers data
// servers on the other cores: measured, predicted and priced.
absl::Status RunConfigurations(const StepBenchOptions& options, StepBench& bench,
                               const std::vector<int>& cpus, int max_servers,
                               const LocalShape& shape, const v1::InstanceType& gpu_type,
                               const v1::InstanceType& data_type, v1::StepBenchReport& report) {
  const int trainer_cpu = cpus[0];
  double homogeneous_usd_per_step = 0;
  for (int servers = 0; servers <= max_servers; ++servers) {
    LogInfo("bench step: %s run",
            servers == 0 ? std::string("homogeneous")
                         : absl::StrCat("heterogeneous, ", servers, " data server(s)"));
    const std::vector<int> server_cpus =
        servers == 0 ? std::vector<int>{trainer_cpu}
                     : std::vector<int>(cpus.begin() + 1, cpus.begin() + 1 + servers);
    ASSIGN_OR_RETURN(RunResult run,
                     bench.Run(trainer_cpu, server_cpus, false, options.device_step_ms));
    v1::StepBenchRun* row = report.add_runs();
    row->set_configuration(servers == 0 ? "homogeneous" : "heterogeneous");
    row->set_data_servers(static_cast<uint32_t>(servers));
    row->set_trainer_cpus(absl::StrCat(trainer_cpu));
    row->set_server_cpus(absl::StrJoin(server_cpus, ","));
    row->set_measured_step_ms(run.step_ms);
    row->set_data_stall_percent(100.0 * run.data_wait_ms / run.step_ms);
    const v1::InstanceType* data = servers == 0 ? nullptr : &shape.data;
    row->set_predicted_step_ms(Estimate(shape.workload, shape.gpu, data, servers).step_ms());
    *row->mutable_priced() =
        PriceMeasured(gpu_type, servers == 0 ? nullptr : &data_type, servers, run.step_ms);
    if (servers == 0) {
      homogeneous_usd_per_step = row->priced().usd_per_step();
    }
    row->mutable_priced()->set_price_performance_improvement(1.0 - row->priced().usd_per_step() /
                                                                       homogeneous_usd_per_step);
  }
  return absl::OkStatus();
}

// The headline: the first heterogeneous configuration against its
// prediction and the homogeneous price.
void Summarize(v1::StepBenchReport& report) {
  const v1::StepBenchRun& heterogeneous = report.runs(1);
  report.set_predicted_step_ms(heterogeneous.predicted_step_ms());
  report.set_measured_step_ms(heterogeneous.measured_step_ms());
  report.set_prediction_error(
      std::abs(heterogeneous.predicted_step_ms() - heterogeneous.measured_step_ms()) /
      heterogeneous.measured_step_ms());
  report.set_price_performance_improvement(heterogeneous.priced().price_performance_improvement());
}

}  // namespace

absl::StatusOr<std::string> RunStepBench(const StepBenchOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<int> cpus, CheckPrerequisites(options));
  ASSIGN_OR_RETURN(const PriceTable prices, PriceTable::Load(options.prices));
  ASSIGN_OR_RETURN(const v1::InstanceType gpu_type, prices.Find(options.gpu_instance));
  ASSIGN_OR_RETURN(const v1::InstanceType data_type, prices.Find(options.data_instance));
  const std::filesystem::path work =
      std::filesystem::temp_directory_path() / absl::StrCat("heterodl-step-", getpid());
  std::filesystem::create_directories(work);
  StepBench bench(options, work);
  const int max_servers = std::min<int>(options.max_data_servers > 0 ? options.max_data_servers : 8,
                                        static_cast<int>(cpus.size()) - 1);
  v1::StepBenchReport report;
  report.set_model(options.model);
  report.set_batch_size(static_cast<uint32_t>(options.batch_size));
  report.set_pipeline(options.pipeline);
  report.set_gpu_instance(gpu_type.name());
  report.set_data_instance(data_type.name());

  // 1. What one core decodes: a trainer that does nothing, one server.
  LogInfo("bench step: measuring decode + augment on one core");
  ASSIGN_OR_RETURN(RunResult decode, bench.Run(cpus[0], {cpus[1]}, false, 0.01));
  const double rate = options.batch_size * 1000.0 / decode.step_ms;
  report.set_images_per_sec_per_core(rate);
  ASSIGN_OR_RETURN(const double device_step_ms,
                   MeasureDeviceStep(options, bench, cpus[0], cpus[1], report));
  report.set_device_step_ms(device_step_ms);
  const LocalShape shape = LocalShapeOf(options, device_step_ms, rate, gpu_type, data_type);
  RETURN_IF_ERROR(
      RunConfigurations(options, bench, cpus, max_servers, shape, gpu_type, data_type, report));
  Summarize(report);
  std::error_code error;
  std::filesystem::remove_all(work, error);
  if (!options.report_dir.empty()) {
    RETURN_IF_ERROR(WriteReport(report, shape.workload, shape.gpu, shape.data, options.report_dir));
    LogInfo("bench step: report written to %s/report.md", options.report_dir);
  }
  return options.json ? ToJson(report) : FormatTable(report);
}

}  // namespace heterodl
