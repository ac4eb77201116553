#include "src/metrics/server_metrics.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "src/client/server_status.h"
#include "src/metrics/prometheus_text.h"

namespace heterodl {
namespace {

double Number(uint64_t value) { return static_cast<double>(value); }

}  // namespace

std::string RenderServerMetrics(const v1::ServerStats& stats, const std::string& version) {
  PrometheusText text;
  text.Gauge("heterodl_build_info", "The heterodl version of this process, and its role.",
             {{{{"version", version}, {"role", "data"}}, 1}});
  const uint64_t failed = stats.samples_failed();
  const uint64_t replaced = std::min(stats.samples_replaced(), failed);
  text.Counter(
      "heterodl_samples_total",
      "Samples this server built into batches, by outcome: ok, replaced (the sample "
      "failed and a deterministic other filled its slot), failed (no replacement "
      "either: zero-filled, or left out of a collated batch).",
      {{{{"status", "ok"}}, Number(stats.samples_sent() - std::min(failed, stats.samples_sent()))},
       {{{"status", "replaced"}}, Number(replaced)},
       {{{"status", "failed"}}, Number(failed - replaced)}});
  text.Counter("heterodl_batches_total", "Batches this server built.",
               {{{}, Number(stats.batches_sent())}});
  text.Counter("heterodl_samples_decoded_with_warnings_total",
               "Samples decoded around damaged data (a JPEG whose data ends early).",
               {{{}, Number(stats.samples_decoded_with_warnings())}});
  text.Gauge("heterodl_server_capacity_samples_per_second",
             "Samples per second this server's threads would build if never idle (0 before it "
             "has built any).",
             {{{}, BuildCapacity(stats)}});
  text.Gauge("heterodl_server_recent_samples_per_second",
             "Samples per second this server built over about the last 10 seconds.",
             {{{}, stats.recent_images_per_second()}});
  text.Counter("heterodl_server_stage_seconds_total",
               "Thread seconds spent per stage of building samples.",
               {{{{"stage", "read"}}, stats.read_seconds()},
                {{{"stage", "decode"}}, stats.decode_seconds()},
                {{{"stage", "augment"}}, stats.augment_seconds()}});
  text.Counter("heterodl_server_send_seconds_total",
               "Seconds from batches being ready to their bytes having been sent, summed.",
               {{{}, stats.send_seconds()}});
  text.Gauge("heterodl_server_worker_threads", "Threads building samples.",
             {{{}, Number(stats.worker_threads())}});
  text.Gauge("heterodl_server_streams", "Open batch streams.",
             {{{}, Number(stats.active_streams())}});
  text.Gauge("heterodl_server_batches_in_flight", "Batches requested and not yet sent.",
             {{{}, Number(stats.batches_in_flight())}});
  text.Gauge("heterodl_server_memory_budget_bytes", "The memory budget for batches.",
             {{{}, Number(stats.memory_budget_bytes())}});
  text.Gauge("heterodl_server_memory_reserved_bytes", "Batch memory reserved now.",
             {{{}, Number(stats.memory_reserved_bytes())}});
  text.Counter("heterodl_server_refused_total", "Calls and streams refused, by reason.",
               {{{{"reason", "unauthenticated"}}, Number(stats.calls_refused_unauthenticated())},
                {{{"reason", "stream_limit"}}, Number(stats.streams_refused_at_limit())},
                {{{"reason", "host_stream_limit"}}, Number(stats.streams_refused_per_host())},
                {{{"reason", "costly_pipeline"}}, Number(stats.pipelines_refused_costly())},
                {{{"reason", "unread_stream"}}, Number(stats.streams_ended_unread())}});
  text.Gauge("heterodl_server_dataset_samples", "Samples in the dataset this server serves.",
             {{{}, Number(stats.num_samples())}});
  text.Gauge("heterodl_process_peak_resident_memory_bytes", "Peak resident memory of the server.",
             {{{}, Number(stats.peak_rss_bytes())}});
  text.Gauge(
      "heterodl_server_start_time_seconds",
      "When the server started, in seconds since the Unix epoch.",
      {{{}, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - stats.uptime_seconds()}});
  return std::move(text).Take();
}

}  // namespace heterodl
