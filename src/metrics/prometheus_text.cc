#include "src/metrics/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heterodl {
namespace {

// A label value as the format quotes it: backslash, double quote and line
// feed escaped.
std::string EscapeLabelValue(const std::string& value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        escaped += "\\\\";
        break;
      case '"':
        escaped += "\\\"";
        break;
      case '\n':
        escaped += "\\n";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

// As Go formats a float, which Prometheus reads: integers exactly (counts
// up to 2^53), others in the fewest digits that read back the same, +Inf,
// -Inf and NaN by name.
std::string FormatValue(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "+Inf" : "-Inf";
  }
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrFormat("%.0f", value);
  }
  for (int digits = 15; digits < 17; ++digits) {
    std::string shortest = absl::StrFormat("%.*g", digits, value);
    if (std::strtod(shortest.c_str(), nullptr) == value) {
      return shortest;
    }
  }
  return absl::StrFormat("%.17g", value);
}

}  // namespace

void MetricHistogram::Observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  if (bucket == bounds_.end()) {
    ++above_;
  } else {
    ++counts_[static_cast<size_t>(bucket - bounds_.begin())];
  }
  ++count_;
  sum_ += value;
}

void PrometheusText::Counter(const std::string& name, const std::string& help,
                             const std::vector<MetricSample>& samples) {
  Family(name, help, "counter", samples);
}

void PrometheusText::Gauge(const std::string& name, const std::string& help,
                           const std::vector<MetricSample>& samples) {
  Family(name, help, "gauge", samples);
}

void PrometheusText::Histogram(const std::string& name, const std::string& help,
                               const MetricHistogram& histogram) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  // Buckets are cumulative on the wire.
  uint64_t cumulative = 0;
  for (size_t i = 0; i < histogram.bounds().size(); ++i) {
    cumulative += histogram.counts()[i];
    Sample(name + "_bucket", {{"le", FormatValue(histogram.bounds()[i])}},
           static_cast<double>(cumulative));
  }
  Sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(histogram.count()));
  Sample(name + "_sum", {}, histogram.sum());
  Sample(name + "_count", {}, static_cast<double>(histogram.count()));
}

void PrometheusText::Family(const std::string& name, const std::string& help, const char* type,
                            const std::vector<MetricSample>& samples) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  for (const MetricSample& sample : samples) {
    Sample(name, sample.labels, sample.value);
  }
}

void PrometheusText::Sample(const std::string& name, const MetricLabels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&text_, i == 0 ? "" : ",", labels[i].first, "=\"",
                      EscapeLabelValue(labels[i].second), "\"");
    }
    text_ += '}';
  }
  absl::StrAppend(&text_, " ", FormatValue(value), "\n");
}

}  // namespace heterodl
