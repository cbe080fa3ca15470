#include "bench/measure/stats.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/error.h"

namespace trainlab::bench {

Summary summarize(const std::vector<double>& values) {
  TL_CHECK(!values.empty(), "statistics: no values to summarise");
  Summary s;
  s.n = static_cast<int>(values.size());
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t mid = sorted.size() / 2;
  s.median = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  s.min = sorted.front();
  s.max = sorted.back();
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(s.n);
  double squares = 0;
  for (double v : sorted) squares += (v - s.mean) * (v - s.mean);
  s.std = s.n > 1 ? std::sqrt(squares / static_cast<double>(s.n - 1)) : 0.0;
  return s;
}

double effect_percent(const Summary& now, const Summary& before) {
  TL_CHECK(before.median != 0, "statistics: the previous median is zero");
  return (now.median / before.median - 1.0) * 100.0;
}

bool separable(const Summary& a, const Summary& b) { return a.max < b.min || b.max < a.min; }

Calibration calibrate(const std::vector<double>& arm_a, const std::vector<double>& arm_b) {
  Calibration c;
  c.a = summarize(arm_a);
  c.b = summarize(arm_b);
  const double centre = (c.a.median + c.b.median) / 2;
  c.noise_floor_percent = centre != 0 ? std::abs(c.a.median - c.b.median) / centre * 100.0 : 0.0;
  c.valid = !separable(c.a, c.b);
  return c;
}

Verdict verdict(const Summary& now, const Summary& before, const std::optional<Calibration>& calibration) {
  if (now.n < 2 || before.n < 2) return Verdict::too_few_repeats;
  if (calibration && !calibration->valid) return Verdict::no_conclusion;
  return separable(now, before) ? Verdict::separable : Verdict::not_separable;
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::separable:
      return "yes";
    case Verdict::not_separable:
      return "no";
    case Verdict::no_conclusion:
      return "NO CONCLUSION";
    case Verdict::too_few_repeats:
      return "n/a (1 repeat)";
  }
  return "?";
}

const char* verdict_words(Verdict v) {
  switch (v) {
    case Verdict::separable:
      return "separable";
    case Verdict::not_separable:
      return "not separable";
    case Verdict::no_conclusion:
    case Verdict::too_few_repeats:
      return verdict_text(v);
  }
  return "?";
}

double floor_multiple(double effect_percent, double noise_floor_percent) {
  if (!(noise_floor_percent >= 0)) return std::nan("");
  if (noise_floor_percent == 0) return std::abs(effect_percent) > 0 ? INFINITY : 0.0;
  return std::abs(effect_percent) / noise_floor_percent;
}

std::string floor_multiple_text(double effect_percent, const std::optional<Calibration>& calibration) {
  if (!calibration) return "-";
  const double m = floor_multiple(effect_percent, calibration->noise_floor_percent);
  return std::isinf(m) ? std::string("inf") : fmt::format("{:.1f}x", m);
}

std::string effect_words(double effect_percent, const std::optional<Calibration>& calibration, Verdict v) {
  const std::string floors =
      calibration ? floor_multiple_text(effect_percent, calibration) + " the noise floor" : "no noise floor measured";
  return fmt::format("{:+.1f}% ({}), {}", effect_percent, floors, verdict_words(v));
}

std::size_t best_by_median(const std::vector<std::string>& order, const std::vector<std::vector<double>>& values) {
  TL_CHECK(order.size() == values.size(), "best_by_median: names and value lists differ in number");
  std::optional<std::size_t> best;
  Summary best_s;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (values[i].empty()) continue;
    const Summary s = summarize(values[i]);
    // Strictly better only: an exact tie keeps the earlier name.
    if (!best || s.median > best_s.median || (s.median == best_s.median && s.min > best_s.min)) {
      best = i;
      best_s = s;
    }
  }
  TL_CHECK(best.has_value(), "best_by_median: no alternative has a measurement");
  return *best;
}

nlohmann::json stats_json(const Summary& s) {
  return {{"median", s.median}, {"mean", s.mean}, {"std", s.std}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

Summary stats_from(const nlohmann::json& j) {
  Summary s;
  s.median = j.at("median");
  s.mean = j.at("mean");
  s.std = j.at("std");
  s.min = j.at("min");
  s.max = j.at("max");
  s.n = j.at("n");
  return s;
}

}  // namespace trainlab::bench
