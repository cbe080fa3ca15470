#include "bench/verify.h"

#include <fmt/format.h>
#include <algorithm>
#include <filesystem>
#include <ostream>

#include "backends/error.h"
#include "bench/ladder.h"
#include "bench/stats.h"
#include "engine/trainer.h"

namespace trainlab::bench {

std::vector<std::size_t> verify_sample(std::size_t count, int n) {
  std::vector<std::size_t> out;
  if (count == 0 || n <= 0) return out;
  if (static_cast<std::size_t>(n) >= count) {
    for (std::size_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  if (n == 1) return {count - 1};
  for (int i = 0; i < n; ++i) {
    const std::size_t index = static_cast<std::size_t>(i) * (count - 1) / static_cast<std::size_t>(n - 1);
    if (out.empty() || out.back() != index) out.push_back(index);
  }
  return out;
}

VerifyResult verify_ladder(const std::vector<json>& rung_rows, const Measure& measure, int sample, int rounds,
                           std::ostream* log) {
  TL_CHECK(sample >= 1, "verify: --sample " + std::to_string(sample) + " must be at least 1");
  TL_CHECK(rounds >= 0, "verify: --rounds " + std::to_string(rounds) + " must be at least 1 (0: as recorded)");
  const json* calibration_a = nullptr;
  const json* calibration_b = nullptr;
  std::vector<const json*> measured;
  for (const auto& row : rung_rows) {
    if (row.value("kind", "") != "rung" || row.value("status", "") != "ok") continue;
    if (row.value("calibration", false)) {
      (row.value("rung", "") == "calibration A" ? calibration_a : calibration_b) = &row;
    } else {
      measured.push_back(&row);
    }
  }
  TL_CHECK(!measured.empty(), "verify: the run has no measured rung to re-run");
  const json* reference = calibration_a ? calibration_a : measured.front();
  VerifyResult result;
  result.run_id = reference->value("run_id", "?");
  result.reference = reference->value("rung", "?");
  result.recorded_engine = reference->at("versions").value("engine", "?");
  result.recorded_device = reference->at("device").value("name", "?");
  const std::string type = reference->at("device").value("type", "cpu");
  TL_CHECK(type == "cpu", "verify: run '" + result.run_id + "' was measured on a " + type +
                              " device; verify re-runs on this machine's CPU only (allowed: cpu runs)");
  if (calibration_a && calibration_b) {
    result.noise_floor_percent = calibrate(calibration_a->at("repeats").get<std::vector<double>>(),
                                           calibration_b->at("repeats").get<std::vector<double>>())
                                     .noise_floor_percent;
  }
  const auto reference_repeats = reference->at("repeats").get<std::vector<double>>();
  result.rounds = rounds > 0 ? rounds : static_cast<int>(reference_repeats.size());
  const double widen = result.noise_floor_percent / 100.0;

  // The sampled rungs (never the reference itself: its ratio is 1 by construction).
  std::vector<const json*> candidates;
  for (const json* row : measured)
    if (row != reference) candidates.push_back(row);
  TL_CHECK(!candidates.empty(), "verify: the run has only its reference rung; nothing to compare against it");
  std::vector<const json*> chosen;
  for (std::size_t i : verify_sample(candidates.size(), sample)) chosen.push_back(candidates[i]);
  for (const json* row : chosen) {
    VerifyRow v;
    v.rung = row->at("rung").get<std::string>();
    const auto repeats = row->at("repeats").get<std::vector<double>>();
    std::vector<double> ratios;
    for (std::size_t i = 0; i < std::min(repeats.size(), reference_repeats.size()); ++i)
      ratios.push_back(repeats[i] / reference_repeats[i]);
    TL_CHECK(!ratios.empty(), "verify: rung '" + v.rung + "' has no recorded repeats");
    const Summary s = summarize(ratios);
    v.recorded_lo = s.min;
    v.recorded_hi = s.max;
    v.recorded_median = s.median;
    v.allowed_lo = s.min * (1 - widen);
    v.allowed_hi = s.max * (1 + widen);
    result.rows.push_back(v);
  }

  // Interleaved: each round measures the reference, then every sampled rung.
  for (int round = 0; round < result.rounds; ++round) {
    const double ref = measure(*reference);
    TL_CHECK(ref > 0, "verify: the reference '" + result.reference + "' measured " + std::to_string(ref));
    if (log)
      *log << fmt::format("verify round {}/{}: {:<22} {:>9.1f} samples/s\n", round + 1, result.rounds, result.reference,
                          ref);
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      const double value = measure(*chosen[i]);
      result.rows[i].rerun.push_back(value / ref);
      if (log) {
        *log << fmt::format("verify round {}/{}: {:<22} {:>9.1f} samples/s ({:.3f}x the reference)\n", round + 1,
                            result.rounds, result.rows[i].rung, value, value / ref);
        log->flush();
      }
    }
  }
  for (auto& v : result.rows) {
    v.rerun_median = summarize(v.rerun).median;
    v.within = v.rerun_median >= v.allowed_lo && v.rerun_median <= v.allowed_hi;
  }
  return result;
}

VerifyResult verify_ledger(const VerifyOptions& options) {
  std::error_code ec;
  TL_CHECK(std::filesystem::exists(options.ledger_path, ec),
           "verify: ledger '" + options.ledger_path + "' does not exist (give --ledger with a ladder run's rows)");
  const Ledger ledger(options.ledger_path);
  const auto loaded = ledger.load();
  std::string run_id = options.run_id;
  if (run_id.empty()) {
    for (const auto& row : loaded.rows)
      if (row.value("kind", "") == "rung") run_id = row.value("run_id", "");
  }
  TL_CHECK(!run_id.empty(), "verify: '" + options.ledger_path + "' holds no ladder run (rung rows) to re-run");
  std::vector<json> rows;
  for (const auto& row : loaded.rows)
    if (row.value("run_id", "") == run_id && row.value("kind", "") == "rung") rows.push_back(row);
  TL_CHECK(!rows.empty(), "verify: run '" + run_id + "' has no rung rows in '" + options.ledger_path +
                              "' (an interrupted ladder run cannot be verified)");
  const Measure measure = [](const json& row) {
    const std::string rung = row.at("rung");
    TrainConfig config = config_from(row.at("config").get<KnobMap>(), "verify: rung '" + rung + "'");
    config.reporting.eval_at_end = false;
    config.reporting.eval_every = 0;
    config.reporting.trace.clear();
    config.checkpoint.save.clear();
    config.reporting.log_every = config.steps + 1;
    Trainer trainer(config);
    return trainer.train(nullptr).samples_per_s;
  };
  return verify_ladder(rows, measure, options.sample, options.rounds, options.log);
}

std::string verify_text(const VerifyResult& r, const std::string& engine_now) {
  std::string out = fmt::format(
      "verify: ladder run {} (recorded on {}, engine {}), re-run here by engine {} against the recorded values "
      "(the recorded engine is not rebuilt); each figure as its ratio to '{}' measured in the same rounds, "
      "{} round(s); allowed: the recorded per-round ratios' min-max widened by the noise floor {:.1f}%\n",
      r.run_id, r.recorded_device, r.recorded_engine, engine_now, r.reference, r.rounds, r.noise_floor_percent);
  int within = 0;
  for (const auto& v : r.rows) {
    const Summary s = summarize(v.rerun);
    std::string where = "within";
    if (!v.within) {
      const double off = v.rerun_median < v.allowed_lo ? (v.rerun_median / v.allowed_lo - 1) * 100
                                                       : (v.rerun_median / v.allowed_hi - 1) * 100;
      where = fmt::format("OUTSIDE ({:+.1f}% {} the allowed range)", off, off < 0 ? "below" : "beyond");
    }
    within += v.within ? 1 : 0;
    out += fmt::format(
        "  {:<22} recorded {:.3f}x ({:.3f}-{:.3f}), allowed {:.3f}-{:.3f}; re-run {:.3f}x ({:.3f}-{:.3f}): {}\n",
        v.rung, v.recorded_median, v.recorded_lo, v.recorded_hi, v.allowed_lo, v.allowed_hi, v.rerun_median, s.min,
        s.max, where);
  }
  out += fmt::format("verify: {} of {} re-run figures within their recorded spread\n", within, r.rows.size());
  return out;
}

}  // namespace trainlab::bench
