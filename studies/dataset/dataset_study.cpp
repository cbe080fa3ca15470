#include "studies/dataset/dataset_study.h"

#include <fmt/format.h>
#include <algorithm>
#include <optional>

#include "backends/error.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

namespace {

std::string range(const std::vector<double>& v, const char* f) {
  if (v.empty()) return "-";
  const Summary s = summarize(v);
  return fmt::format(fmt::runtime(f), s.median) + " (" + fmt::format(fmt::runtime(f), s.min) + "-" +
         fmt::format(fmt::runtime(f), s.max) + ")";
}

// The effect of `arm` against `control`: "-62.8% (141.6x the noise floor), separable".
std::string effect(const std::vector<double>& arm, const std::vector<double>& control, const Calibration& cal) {
  const Summary a = summarize(arm), c = summarize(control);
  return effect_words(effect_percent(a, c), cal, verdict(a, c, cal));
}

}  // namespace

std::vector<DatasetArm> dataset_arms_from_rows(const std::vector<DatasetRepeatRow>& rows) {
  std::vector<DatasetArm> arms;
  for (const auto& row : rows) {
    auto it = std::find_if(arms.begin(), arms.end(), [&](const DatasetArm& a) { return a.name == row.arm; });
    if (it == arms.end()) {
      arms.push_back({});
      it = arms.end() - 1;
      it->name = row.arm;
      it->calibration = row.calibration;
    }
    if (row.files) it->files = *row.files;
    if (row.bytes_per_sample) it->bytes_per_sample = *row.bytes_per_sample;
    if (!row.header.ok()) continue;
    const DatasetMeasurement& m = row.measurement;
    it->loader.push_back(m.loader_samples_per_s);
    it->train.push_back(m.train_samples_per_s);
    it->wait_ms.push_back(m.data_wait_ms_per_step);
    it->read_us.push_back(m.read_cpu_us_per_sample);
    it->decode_us.push_back(m.decode_cpu_us_per_sample);
  }
  return arms;
}

std::string dataset_report(const std::vector<DatasetArm>& arms) {
  TL_CHECK(!arms.empty() && !arms.front().loader.empty(),
           "dataset study: the control arm has no successful round; nothing to compare against");
  const auto cal_arm =
      std::find_if(arms.begin(), arms.end(), [](const DatasetArm& a) { return a.calibration && !a.loader.empty(); });
  TL_CHECK(cal_arm != arms.end(), "dataset study: no calibration arm with a successful round: no noise floor");
  const DatasetArm& control = arms.front();
  const Calibration loader_cal = calibrate(control.loader, cal_arm->loader);
  const Calibration train_cal = calibrate(control.train, cal_arm->train);
  std::string out = fmt::format(
      "noise floor ({} against itself): loader {:.1f}%, training {:.1f}%{}\n\n", control.name,
      loader_cal.noise_floor_percent, train_cal.noise_floor_percent,
      loader_cal.valid && train_cal.valid ? ""
      : !loader_cal.valid && !train_cal.valid
          ? " (both measures' two copies came out separable: NO CONCLUSION for the arms they invalidate)"
      : !loader_cal.valid ? " (the loader's two copies came out separable: NO CONCLUSION for the arms it invalidates)"
                          : " (training's two copies came out separable: NO CONCLUSION for the arms it invalidates)");
  out += fmt::format(
      "| arm | files | bytes/sample | loader samples/s | read us/sample | decode us/sample | training samples/s | "
      "data wait ms/step | loader vs {} | training vs {} |\n|---|---|---|---|---|---|---|---|---|---|\n",
      control.name, control.name);
  for (const auto& arm : arms) {
    const bool is_control = &arm == &control;
    const char* same = arm.calibration ? "calibration: " : "";
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", arm.name,
        arm.files >= 0 ? std::to_string(arm.files) : "-",
        arm.bytes_per_sample >= 0 ? fmt::format("{:.0f}", arm.bytes_per_sample) : "-", range(arm.loader, "{:.0f}"),
        range(arm.read_us, "{:.1f}"), range(arm.decode_us, "{:.1f}"), range(arm.train, "{:.0f}"),
        range(arm.wait_ms, "{:.2f}"),
        is_control || arm.loader.empty() ? "control" : same + effect(arm.loader, control.loader, loader_cal),
        is_control || arm.train.empty() ? "control" : same + effect(arm.train, control.train, train_cal));
  }
  out += "\nverdict: what each re-export costs against " + control.name + "\n\n";
  for (const auto& arm : arms) {
    if (&arm == &control || arm.calibration || arm.loader.empty()) continue;
    out += fmt::format("- {}: loader {}; training {}\n", arm.name, effect(arm.loader, control.loader, loader_cal),
                       effect(arm.train, control.train, train_cal));
  }
  return out;
}

}  // namespace trainlab::bench
