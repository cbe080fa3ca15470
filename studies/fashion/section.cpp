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

std::optional<ReportSection> fashion_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<FashionRunRow>());
  if (run_id.empty()) return std::nullopt;
  const FashionRunRow& first = rows.front();
  const std::string table =
      fashion_report(rows, fashion_baselines("/usr/share/doc/dataset-fashion-mnist/README.md.gz"));
  ReportSection section = section_of("fashion", run_id, first.header.env);
  const std::string figure = figure_path("fashion", run_id);
  // The peer trains SmallCNN only: a run of another model is trainlab's alone.
  const bool peer = first.model == "smallcnn" && first.model_options.empty();
  section.markdown = fmt::format(
      "\n## Real data: {} on Fashion-MNIST, trainlab{}\n\nRun `{}` of `studies/fashion` (`make fashion`) on "
      "{}.\n\n{}\n![per-class test accuracy]({})\n",
      model_label(first.model, first.model_options), peer ? " and PyTorch" : " (the PyTorch peer trains SmallCNN only)",
      run_id, measured_on(first.header.env), table, figure);
  section.figures.push_back({figure, per_class_figure(rows)});
  if (std::string confusion = confusion_figure(rows); !confusion.empty()) {
    const std::string path = figure_path("fashion_confusion", run_id);
    section.markdown += "\n![trainlab's confusion matrix](" + path + ")\n";
    section.figures.push_back({path, std::move(confusion)});
  }
  section.readme_table = table;
  return section;
}

}  // namespace

SectionDef fashion_report_section() { return {"fashion", fashion_section}; }

}  // namespace trainlab::bench
