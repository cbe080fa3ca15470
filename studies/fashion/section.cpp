// The Fashion-MNIST study's report section: the latest run's table (trainlab and PyTorch side by
// side, the published baselines) and its figure, each class's test accuracy for both frameworks.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>

#include "bench/measure/knobs.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/fashion/fashion_study.h"

namespace trainlab::bench {

namespace {

// Each class's accuracy, trainlab's and PyTorch's (bar: median over seeds; whisker: min-max).
std::string per_class_figure(const std::vector<FashionRunRow>& rows) {
  std::map<std::string, std::vector<std::vector<double>>> by;  // framework -> per class -> seeds
  std::vector<std::string> names;
  for (const auto& r : rows) {
    if (!r.header.ok()) continue;
    auto& classes = by[r.framework];
    classes.resize(std::max(classes.size(), r.per_class_accuracy.size()));
    for (std::size_t k = 0; k < r.per_class_accuracy.size(); ++k) classes[k].push_back(100 * r.per_class_accuracy[k]);
    if (names.size() < r.class_names.size()) names = r.class_names;
  }
  chart::BarChart bars;
  bars.label_width = 170;
  bars.legend = {{"trainlab", chart::kBlue}, {"PyTorch", chart::kRed}};
  const std::size_t classes = by.count("trainlab") ? by["trainlab"].size() : 0;
  for (std::size_t k = 0; k < classes; ++k) {
    chart::BarRow heading;
    heading.label = k < names.size() ? names[k] : "class " + std::to_string(k);
    heading.heading = true;
    bars.rows.push_back(heading);
    for (const auto& [framework, colour] : {std::pair{"trainlab", chart::kBlue}, std::pair{"pytorch", chart::kRed}}) {
      if (!by.count(framework) || k >= by[framework].size() || by[framework][k].empty()) continue;
      const Summary s = summarize(by[framework][k]);
      chart::BarRow bar;
      bar.label = framework;
      bar.value = s.median;
      bar.lo = s.min;
      bar.hi = s.max;
      bar.colour = colour;
      bar.value_text = fmt::format("{:.1f}%", s.median);
      bars.rows.push_back(bar);
    }
  }
  return chart::render(
      chart::Figure{"Fashion-MNIST test accuracy per class, %", {bars}, {"bar: median over seeds; whisker: min-max"}});
}

// trainlab's confusion matrix on the test split, summed over its seeds (empty when no row has one).
std::string confusion_figure(const std::vector<FashionRunRow>& rows) {
  chart::Heatmap map;
  map.row_title = "true class";
  map.column_title = "predicted class";
  int seeds = 0;
  std::int64_t samples = 0;
  for (const auto& r : rows) {
    if (!r.header.ok() || r.framework != "trainlab" || r.confusion.empty()) continue;
    const auto classes = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(r.confusion.size()))));
    if (classes * classes != r.confusion.size()) continue;  // not a square matrix: not drawn
    if (map.values.empty()) {
      map.values.assign(classes, std::vector<double>(classes, 0.0));
      for (std::size_t k = 0; k < classes; ++k)
        map.row_labels.push_back(k < r.class_names.size() ? r.class_names[k] : "class " + std::to_string(k));
      map.column_labels = map.row_labels;
    }
    if (map.values.size() != classes) continue;
    for (std::size_t i = 0; i < classes; ++i)
      for (std::size_t j = 0; j < classes; ++j) map.values[i][j] += static_cast<double>(r.confusion[i * classes + j]);
    ++seeds;
    samples += r.test_samples;
  }
  if (seeds == 0) return "";
  return chart::render(chart::Figure{
      fmt::format("Fashion-MNIST: trainlab's confusion matrix, {} seed(s), {} test predictions", seeds, samples),
      {map},
      {"row: the true class; column: the prediction; shade: the cell's share of its row (blue: correct, red: "
       "confused)"}});
}

// The first steps' loss, trainlab's and PyTorch's (kCurveWindow-step means; line: the median over
// seeds, whisker: min-max), every tenth step.
std::string loss_curve_figure(const std::vector<FashionRunRow>& rows) {
  chart::LineChart lines;
  lines.x_label = "step";
  lines.y_label = "training loss";
  for (const auto& [framework, colour] : {std::pair{"trainlab", chart::kBlue}, std::pair{"pytorch", chart::kRed}}) {
    const auto curves = smoothed_curves(rows, framework);
    if (curves.empty()) continue;
    std::size_t steps = curves.front().size();
    for (const auto& c : curves) steps = std::min(steps, c.size());
    chart::Series series{framework, colour, {}, false};
    for (std::size_t i = 0; i < steps; i += 10) {
      std::vector<double> at;
      for (const auto& c : curves) at.push_back(c[i]);
      const Summary s = summarize(at);
      series.points.push_back({static_cast<double>(i + 1), s.median, s.min, s.max});
    }
    lines.series.push_back(std::move(series));
  }
  if (lines.series.size() < 2) return "";
  return chart::render(
      chart::Figure{"The first steps' training loss, trainlab against PyTorch",
                    {lines},
                    {fmt::format("{}-step means; line: the median over seeds, whisker: min-max", kCurveWindow)}});
}

// The README's headline row of a run: both frameworks' test accuracy and samples/s over the seeds,
// the throughput ratio per seed, and how many of trainlab's seeds reached the run's goal.
HeadlineRow fashion_headline(const std::vector<FashionRunRow>& rows, const std::string& run_id) {
  std::vector<double> acc[2], speed[2], ratio;
  std::map<std::int64_t, double> torch_speed;
  int reached = 0, failed = 0;
  for (const auto& r : rows) {
    if (!r.header.ok()) {
      ++failed;
      continue;
    }
    const int i = r.framework == "pytorch" ? 1 : 0;
    acc[i].push_back(100 * r.test_accuracy);
    speed[i].push_back(r.samples_per_s);
    if (i == 1) torch_speed[r.seed] = r.samples_per_s;
    if (i == 0 && r.test_accuracy >= r.goal) ++reached;
  }
  for (const auto& r : rows)
    if (r.header.ok() && r.framework == "trainlab" && torch_speed.count(r.seed) && torch_speed[r.seed] > 0)
      ratio.push_back(r.samples_per_s / torch_speed[r.seed]);
  const auto text = [](const std::vector<double>& v, const char* format) {
    if (v.empty()) return std::string("-");
    const Summary s = summarize(v);
    return fmt::format(fmt::runtime(std::string(format) + " (" + format + "-" + format + ")"), s.median, s.min, s.max);
  };
  const FashionRunRow& first = rows.front();
  std::string figure =
      fmt::format("test accuracy {}% against PyTorch's {}%; {} against {} samples/s", text(acc[0], "{:.2f}"),
                  text(acc[1], "{:.2f}"), text(speed[0], "{:.0f}"), text(speed[1], "{:.0f}"));
  if (!ratio.empty()) figure += ", " + text(ratio, "{:.2f}") + "x";
  figure += fmt::format("; goal {:.0f}%: reached by {} of {} trainlab seeds", 100 * first.goal, reached, acc[0].size());
  if (failed > 0) figure += fmt::format("; {} runs failed", failed);
  return {fmt::format("{} on Fashion-MNIST, {} epochs of batch {}, {} seed{}: trainlab and PyTorch",
                      model_label(first.model, first.model_options), first.epochs, first.batch, acc[0].size(),
                      acc[0].size() == 1 ? "" : "s"),
          figure, run_id};
}

// The latest run among the rows `wanted` keeps, as the section `name`.
std::optional<ReportSection> fashion_section_of(const SectionInput& in, const std::string& name,
                                                bool (*wanted)(const FashionRunRow&)) {
  std::vector<FashionRunRow> all = in.read<FashionRunRow>(), kept;
  for (auto& r : all)
    if (wanted(r)) kept.push_back(std::move(r));
  const auto [run_id, rows] = latest_run(kept);
  if (run_id.empty()) return std::nullopt;
  const FashionRunRow& first = rows.front();
  const std::string table =
      fashion_report(rows, fashion_baselines("/usr/share/doc/dataset-fashion-mnist/README.md.gz"));
  ReportSection section = section_of(name, run_id, first.header.env);
  const std::string figure = figure_path(name, run_id);
  bool peer = false;
  for (const auto& r : rows) peer = peer || r.framework == "pytorch";
  section.markdown = fmt::format(
      "\n## Real data: {} on Fashion-MNIST, trainlab{}\n\nRun `{}` of `studies/fashion` (`make {}`) on "
      "{}.\n\n{}\n![per-class test accuracy]({})\n",
      model_label(first.model, first.model_options), peer ? " and PyTorch" : " (no PyTorch peer for this model)",
      run_id, name, measured_on(first.header.env), table, figure);
  section.figures.push_back({figure, per_class_figure(rows)});
  if (std::string curves = loss_curve_figure(rows); !curves.empty()) {
    const std::string path = figure_path(name + "_loss", run_id);
    section.markdown += "\n![the first steps' training loss](" + path + ")\n";
    section.figures.push_back({path, std::move(curves)});
  }
  if (std::string confusion = confusion_figure(rows); !confusion.empty()) {
    const std::string path = figure_path(name + "_confusion", run_id);
    section.markdown += "\n![trainlab's confusion matrix](" + path + ")\n";
    section.figures.push_back({path, std::move(confusion)});
  }
  section.readme_table = table;
  section.headline = {fashion_headline(rows, run_id)};
  return section;
}

}  // namespace

// `make fashion`'s section: the latest run of any model but the residual network, which has its own
// (`make resnet`).
SectionDef fashion_report_section() {
  return {"fashion", [](const SectionInput& in) {
            return fashion_section_of(in, "fashion", [](const FashionRunRow& r) { return r.model != "resnet"; });
          }};
}
SectionDef resnet_report_section() {
  return {"resnet", [](const SectionInput& in) {
            return fashion_section_of(in, "resnet", [](const FashionRunRow& r) { return r.model == "resnet"; });
          }};
}

}  // namespace trainlab::bench
