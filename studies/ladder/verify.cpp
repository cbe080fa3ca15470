#include "studies/ladder/verify.h"

#include <fmt/format.h>
#include <algorithm>
#include <filesystem>
#include <ostream>

#include "backends/error.h"
#include "bench/measure/stats.h"
#include "engine/train/trainer.h"
#include "studies/ladder/ladder.h"

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

VerifyResult verify_ladder(const std::vector<LadderRungRow>& rung_rows, const Measure& measure, int sample, int rounds,
                           std::ostream* log) {
  TL_CHECK(sample >= 1, "verify: --sample " + std::to_string(sample) + " must be at least 1");
  TL_CHECK(rounds >= 0, "verify: --rounds " + std::to_string(rounds) + " must be at least 1 (0: as recorded)");
  const LadderRungRow* calibration_a = nullptr;
  const LadderRungRow* calibration_b = nullptr;
  std::vector<const LadderRungRow*> measured;
  for (const auto& row : rung_rows) {
    if (!row.header.ok()) continue;
    if (row.arm.calibration) {
      (row.arm.rung == "calibration A" ? calibration_a : calibration_b) = &row;
    } else {
      measured.push_back(&row);
    }
  }
  TL_CHECK(!measured.empty(), "verify: the run has no measured rung to re-run");
  const LadderRungRow* reference = calibration_a ? calibration_a : measured.front();
  VerifyResult result;
  result.run_id = reference->header.run_id;
  result.reference = reference->arm.rung;
  result.recorded_engine = reference->header.env.engine();
  result.recorded_device = reference->header.env.device.name;
  const std::string type = reference->header.env.device.type.empty() ? "cpu" : reference->header.env.device.type;
  TL_CHECK(type == "cpu", "verify: run '" + result.run_id + "' was measured on a " + type +
                              " device; verify re-runs on this machine's CPU only (allowed: cpu runs)");
  if (calibration_a && calibration_b)
    result.noise_floor_percent = calibrate(calibration_a->repeats, calibration_b->repeats).noise_floor_percent;
  const std::vector<double>& reference_repeats = reference->repeats;
  result.rounds = rounds > 0 ? rounds : static_cast<int>(reference_repeats.size());
  const double widen = result.noise_floor_percent / 100.0;

  // The sampled rungs (never the reference itself: its ratio is 1 by construction).
  std::vector<const LadderRungRow*> candidates;
  for (const LadderRungRow* row : measured)
    if (row != reference) candidates.push_back(row);
  TL_CHECK(!candidates.empty(), "verify: the run has only its reference rung; nothing to compare against it");
  std::vector<const LadderRungRow*> chosen;
  for (std::size_t i : verify_sample(candidates.size(), sample)) chosen.push_back(candidates[i]);
  for (const LadderRungRow* row : chosen) {
    VerifyRow v;
    v.rung = row->arm.rung;
    std::vector<double> ratios;
    for (std::size_t i = 0; i < std::min(row->repeats.size(), reference_repeats.size()); ++i)
      ratios.push_back(row->repeats[i] / reference_repeats[i]);
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
  const std::string run_id = options.run_id.empty() ? loaded.latest_run({LadderRungRow::kKind}) : options.run_id;
  TL_CHECK(!run_id.empty(), "verify: '" + options.ledger_path + "' holds no ladder run (rung rows) to re-run");
  std::vector<std::string> warnings;
  std::vector<LadderRungRow> rows;
  for (auto& row : loaded.read<LadderRungRow>(&warnings))
    if (row.header.run_id == run_id) rows.push_back(std::move(row));
  if (options.log)
    for (const auto& w : warnings) *options.log << "verify: " << w << "\n";
  TL_CHECK(!rows.empty(), "verify: run '" + run_id + "' has no rung rows in '" + options.ledger_path +
                              "' (an interrupted ladder run cannot be verified)");
  const Measure measure = [](const LadderRungRow& row) {
    TrainConfig config = config_from(row.arm.config, "verify: rung '" + row.arm.rung + "'");
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
