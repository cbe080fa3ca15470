// Noise-aware statistics for benchmark repeats (the seed's rules): median and min-max, the effect
// of a rung against the previous one, separability when the repeat ranges do not overlap, and the
// calibration arms: two secretly identical configurations whose gap is the noise floor. When the
// arms themselves come out separable the test is unsound at this number of repeats and every
// verdict is NO CONCLUSION.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trainlab::bench {

struct Summary {
  double median = 0, mean = 0, std = 0, min = 0, max = 0;  // std: sample standard deviation
  int n = 0;
  template <class F>  // as a ledger row holds it (bench/measure/row.h)
  void fields(F& f) {
    f("median", median);
    f("mean", mean);
    f("std", std);
    f("min", min);
    f("max", max);
    f("n", n);
  }
};
Summary summarize(const std::vector<double>& values);

// Percent change of the medians: +10 means `now` is 10% faster than `before`.
double effect_percent(const Summary& now, const Summary& before);
// The repeat ranges [min, max] do not overlap.
bool separable(const Summary& a, const Summary& b);

struct Calibration {
  Summary a, b;
  double noise_floor_percent = 0;  // |median gap| / mean of the medians
  bool valid = false;              // the arms overlap, as identical configurations must
};
Calibration calibrate(const std::vector<double>& arm_a, const std::vector<double>& arm_b);

enum class Verdict { separable, not_separable, no_conclusion, too_few_repeats };
// too_few_repeats when either side has a single repeat: two points never "overlap", so
// non-overlap says nothing there.
Verdict verdict(const Summary& now, const Summary& before, const std::optional<Calibration>& calibration);
const char* verdict_text(Verdict verdict);   // "yes", "no", "NO CONCLUSION", "n/a (1 repeat)"
const char* verdict_words(Verdict verdict);  // "separable", "not separable", "NO CONCLUSION", "n/a (1 repeat)"

// An effect in units of the noise floor (seed 000: "an effect 3.5x the measured noise floor"):
// |effect| / floor; infinity when the floor measured 0 (two identical medians), NaN without one.
double floor_multiple(double effect_percent, double noise_floor_percent);
// "+12.3% (4.1x the noise floor), separable": the effect, its multiple of the floor when one was
// measured ("no noise floor measured" otherwise) and the verdict's words. Every verdict line
// prints its effect this way.
std::string effect_words(double effect_percent, const std::optional<Calibration>& calibration, Verdict verdict);
// "4.1x" / "inf" / "-" for a table column.
std::string floor_multiple_text(double effect_percent, const std::optional<Calibration>& calibration);

// The best of several named alternatives (a peer's variants): the highest median wins; equal
// medians go to the higher minimum (the steadier), then to the earlier name in `order` (the simpler
// variant, by the list's own order). Returns the index into `order`; alternatives without values
// are passed over, and none at all is an error.
std::size_t best_by_median(const std::vector<std::string>& order, const std::vector<std::vector<double>>& values);

// A Summary as a ledger row holds it ({"median", "mean", "std", "min", "max", "n"}), and back.
nlohmann::json stats_json(const Summary& s);
Summary stats_from(const nlohmann::json& j);

}  // namespace trainlab::bench
