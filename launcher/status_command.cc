// `heterodl status HOST:PORT... [--demand D [--max-stall S]] [--json]`: live
// statistics of data servers, their measured capacity, and with --demand the
// data hosts a trainer consuming D images/s needs (the scaling signal).
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "heterodl/metrics.pb.h"
#include "launcher/commands.h"
#include "launcher/flags.h"
#include "src/client/server_discovery.h"
#include "src/client/server_status.h"
#include "src/common/proto_json.h"
#include "src/common/status_macros.h"
#include "src/sizing/cluster_sizing.h"

namespace heterodl {
namespace {

// One server's lines of the table: what it serves, then its numbers.
void PrintServer(const v1::ServerReport& report) {
  if (!report.error().empty()) {
    absl::PrintF("%s  unreachable: %s\n\n", report.address(), report.error());
    return;
  }
  const v1::ServerStats& stats = report.stats();
  absl::PrintF("%s  %s (%d samples)\n  pipeline %s\n", report.address(), stats.dataset(),
               stats.num_samples(),
               stats.default_pipeline().empty()
                   ? "none: a Python dataset, whose samples its own code makes"
                   : stats.default_pipeline());
  absl::PrintF(
      "  images/s %.1f now (last 10 s), %.1f since start %.0f s ago, %d threads\n"
      "  streams %d (%d with a pixel channel), %d batches in flight\n"
      "  sent %d batches, %d samples, %d replaced after a read or decode failure, %d decoded "
      "with warnings\n"
      "  seconds read %.2f, decode %.2f, augment %.2f, send %.2f; peak memory %d MiB\n",
      stats.recent_images_per_second(), stats.images_per_second(), stats.uptime_seconds(),
      stats.worker_threads(), stats.active_streams(), stats.pixel_channel_streams(),
      stats.batches_in_flight(), stats.batches_sent(), stats.samples_sent(), stats.samples_failed(),
      stats.samples_decoded_with_warnings(), stats.read_seconds(), stats.decode_seconds(),
      stats.augment_seconds(), stats.send_seconds(), stats.peak_rss_bytes() >> 20);
  absl::PrintF(
      "  memory for batches %d of %d MiB (peak %d), %d batches waiting for it (%d since "
      "start)\n",
      stats.memory_reserved_bytes() >> 20, stats.memory_budget_bytes() >> 20,
      stats.memory_peak_reserved_bytes() >> 20, stats.batches_waiting_for_memory(),
      stats.batches_waited_for_memory());
  if (stats.calls_refused_unauthenticated() > 0 || stats.streams_refused_at_limit() > 0 ||
      stats.streams_refused_per_host() > 0 || stats.pipelines_refused_costly() > 0 ||
      stats.streams_ended_unread() > 0) {
    absl::PrintF(
        "  refused %d calls without the token, %d streams over --max-streams, %d over "
        "--max-streams-per-host, %d pipelines over --max-pipeline-cost; ended %d streams "
        "holding batches unread\n",
        stats.calls_refused_unauthenticated(), stats.streams_refused_at_limit(),
        stats.streams_refused_per_host(), stats.pipelines_refused_costly(),
        stats.streams_ended_unread());
  }
  if (report.capacity_images_per_second() > 0) {
    absl::PrintF("  capacity %.0f images/s with every thread busy (busy now %.0f%%)\n\n",
                 report.capacity_images_per_second(),
                 100 * stats.recent_images_per_second() / report.capacity_images_per_second());
  } else {
    absl::PrintF("  capacity not known yet (nothing built)\n\n");
  }
}

// Fills report.sizing from the servers that answered and have built
// something; an error when none has (nothing to size from).
absl::Status SizeDataGroup(double demand, double max_stall, v1::StatusReport& report) {
  std::vector<v1::ServerStats> answers;
  for (const v1::ServerReport& server : report.servers()) {
    if (server.error().empty()) {
      answers.push_back(server.stats());
    }
  }
  const DataGroupCapacity group = MeasureDataGroup(answers);
  if (group.hosts == 0) {
    return absl::FailedPreconditionError(
        "--demand: no server has built a batch yet, so its capacity is not known");
  }
  v1::DataGroupSizing& sizing = *report.mutable_sizing();
  sizing.set_demand_images_per_second(demand);
  sizing.set_max_stall(max_stall);
  sizing.set_capacity_per_host(group.per_host);
  sizing.set_hosts(group.hosts);
  ASSIGN_OR_RETURN(const int needed, DataHostsNeeded(demand, group.per_host, max_stall));
  sizing.set_hosts_needed(needed);
  return absl::OkStatus();
}

}  // namespace

int RunStatusCommand(const CommandContext& context) {
  const std::vector<std::string>& listed = context.arguments;
  // The servers named, and those a servers file or a DNS name lists now (a
  // headless Service's name stands for every data pod, not one of them).
  std::vector<std::string> arguments = listed;
  const ServerSources sources{
      {}, absl::GetFlag(FLAGS_data_servers_file), absl::GetFlag(FLAGS_data_servers_dns)};
  if (sources.dynamic()) {
    if (absl::Status valid = ValidateServerSources(sources); !valid.ok()) {
      std::fprintf(stderr, "%s\n", std::string(valid.message()).c_str());
      return kExitUsage;
    }
    for (const std::string& server : ServerDiscovery(sources).Refresh()) {
      if (std::find(arguments.begin(), arguments.end(), server) == arguments.end()) {
        arguments.push_back(server);
      }
    }
  }
  if (arguments.empty()) {
    std::fprintf(stderr,
                 "usage: heterodl status HOST:PORT... [--data-servers-file F] "
                 "[--data-servers-dns NAME:PORT] [--demand IMAGES_PER_S [--max-stall S]] "
                 "[--json]\n%s",
                 sources.dynamic() ? "(the servers file or DNS name lists no server now)\n" : "");
    return kExitUsage;
  }
  absl::StatusOr<std::string> token = AuthTokenFromFlags();
  if (!token.ok()) {
    std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  int result = kExitOk;
  v1::StatusReport report;
  for (const std::string& address : arguments) {
    v1::ServerReport& server = *report.add_servers();
    server.set_address(address);
    absl::StatusOr<v1::ServerStats> stats =
        FetchServerStatus(address, absl::Seconds(5), *token, TlsFromFlags());
    if (stats.ok()) {
      server.set_capacity_images_per_second(BuildCapacity(*stats));
      *server.mutable_stats() = *std::move(stats);
    } else {
      server.set_error(std::string(stats.status().message()));
      result = kExitFailure;
    }
  }
  const double demand = absl::GetFlag(FLAGS_demand);
  absl::Status sized = absl::OkStatus();
  if (demand > 0) {
    sized = SizeDataGroup(demand, absl::GetFlag(FLAGS_max_stall), report);
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ToJson(report).c_str());
  } else {
    for (const v1::ServerReport& server : report.servers()) {
      PrintServer(server);
    }
    if (report.has_sizing()) {
      const v1::DataGroupSizing& sizing = report.sizing();
      absl::PrintF(
          "data hosts needed: %d (now %d) for at most %.0f%% data stall at %.0f images/s, "
          "each host building %.0f images/s\n",
          sizing.hosts_needed(), sizing.hosts(), 100 * sizing.max_stall(),
          sizing.demand_images_per_second(), sizing.capacity_per_host());
    }
  }
  if (!sized.ok()) {
    std::fprintf(stderr, "%s\n", std::string(sized.message()).c_str());
    result = kExitFailure;
  }
  return result;
}

}  // namespace heterodl
