// PrometheusText: metrics in Prometheus's text exposition format (version
// 0.0.4), what a /metrics endpoint serves. Each family is written whole, its
// HELP and TYPE lines first, then its samples; names, label names and help
// are the caller's constants, label values are escaped here.
//
//   PrometheusText text;
//   text.Counter("heterodl_samples_total", "Samples built.", {
//       {{{"status", "ok"}}, 1024}, {{{"status", "replaced"}}, 3}});
//   text.Gauge("heterodl_data_hosts_needed", "...", {{{}, 3}});
//   text.Histogram("heterodl_data_wait_seconds", "...", histogram);
//   std::string body = std::move(text).Take();
//
// prometheus-cpp is not in Debian bookworm, and the format is a few lines
// per family: https://prometheus.io/docs/instrumenting/exposition_formats/
#ifndef HETERODL_SRC_METRICS_PROMETHEUS_TEXT_H_
#define HETERODL_SRC_METRICS_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heterodl {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

struct MetricSample {
  MetricLabels labels;
  double value = 0;
};

// Observations bucketed by upper bound, as Prometheus's histograms are:
// counts[i] observations were <= bounds[i] and > bounds[i - 1]; `above`
// were larger than every bound.
class MetricHistogram {
 public:
  // REQUIRES: `bounds` ascending.
  explicit MetricHistogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t above() const { return above_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t above_ = 0;
  uint64_t count_ = 0;
  double sum_ = 0;
};

class PrometheusText {
 public:
  // `name` is [a-zA-Z_:][a-zA-Z0-9_:]*, a counter's ending in _total.
  void Counter(const std::string& name, const std::string& help,
               const std::vector<MetricSample>& samples);
  void Gauge(const std::string& name, const std::string& help,
             const std::vector<MetricSample>& samples);
  void Histogram(const std::string& name, const std::string& help,
                 const MetricHistogram& histogram);

  std::string Take() && { return std::move(text_); }

 private:
  void Family(const std::string& name, const std::string& help, const char* type,
              const std::vector<MetricSample>& samples);
  void Sample(const std::string& name, const MetricLabels& labels, double value);

  std::string text_;
};

}  // namespace heterodl

#endif  // HETERODL_SRC_METRICS_PROMETHEUS_TEXT_H_
