#include "bench/stats.h"

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
