// The report's sections for the measurement families other than the studies: all-reduce busbw
// against size (ring, native and the memcpy line), the bucket sweep against its fitted model, weak
// and strong efficiency against world size (with the PyTorch DDP peer), and compare_torch's ratios
// per configuration with their per-round ranges. Each is drawn from the ledger alone (the family's
// latest run) as a table and an SVG figure; bench/report.cpp assembles them into REPORT.md.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/ledger.h"

namespace trainlab::bench {

// One section of the report: its markdown, its figures (path relative to the report, SVG text),
// and the table the README quotes between <!-- marker:begin --> and <!-- marker:end -->.
struct ReportSection {
  json first_row;  // where it was measured
  std::string markdown;
  std::vector<std::pair<std::string, std::string>> figures;
  std::string marker, readme_intro, readme_table;
};

// The latest run of `kind` rows in the ledger that `accept` keeps ("" when there is none), and every
// row of that run.
std::pair<std::string, std::vector<json>> latest_run_of(const std::vector<json>& rows, const std::string& kind,
                                                        bool (*accept)(const json& row) = nullptr);

// A text field of a row by JSON pointer, or "?" where it is absent or not text.
std::string text_at(const json& row, const char* pointer);

// An integer field of an object, or `fallback` where it is absent, not an integer or beyond +-2^40.
std::int64_t int_at(const json& object, const char* key, std::int64_t fallback);

// "AMD EPYC (onednn, 2 threads; engine abc; timer steady_clock)".
std::string measured_on(const json& row);

std::optional<ReportSection> allreduce_section(const std::vector<json>& rows);
std::optional<ReportSection> buckets_section(const std::vector<json>& rows);
std::optional<ReportSection> scaling_section(const std::vector<json>& rows);
std::optional<ReportSection> compare_torch_section(const std::vector<json>& rows);

// A line chart (the families' figures): series of points with an optional min-max whisker each, x
// linear or logarithmic (base 2), y linear from 0. Dashed series are reference lines.
struct ChartPoint {
  double x = 0, y = 0, lo = -1, hi = -1;  // lo/hi < 0: no whisker
};
struct ChartSeries {
  std::string name, colour;
  std::vector<ChartPoint> points;
  bool dashed = false;
};
std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series, bool log_x,
                           std::string (*x_tick)(double x) = nullptr);

}  // namespace trainlab::bench
