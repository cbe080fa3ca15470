// The chart module: every figure the report draws, as SVG, from a description that holds data and
// words only. A study says what to plot (bars with their whiskers, lines over sizes, points, two
// rankings side by side, a matrix of counts); this file alone knows coordinates, axes, ticks, legends and SVG.
//
//   chart::BarChart bars;
//   bars.rows.push_back({.label = "baseline", .value = 1050, .lo = 1013, .hi = 1147});
//   std::string svg = chart::render(chart::Figure{"samples/s per rung", {bars}, {"bar: median; whisker: min-max"}});
//
// A figure is a title, panels side by side (each one of the chart kinds below), and caption lines.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace trainlab::bench::chart {

inline constexpr const char* kBlue = "#3a7ca5";
inline constexpr const char* kRed = "#d1495b";
inline constexpr const char* kDarkRed = "#b03a2e";
inline constexpr const char* kGrey = "#9aa5b1";
inline constexpr const char* kReference = "#888";

// Horizontal bars, one row each, top to bottom. A row is a bar (value, optional whisker lo..hi), a
// stack of segments, a note in place of a bar (a skipped rung), or a group heading.
struct Segment {
  double value = 0;
  std::string colour;
};
struct BarRow {
  std::string label;
  double value = 0;
  std::optional<double> lo, hi;  // the whisker
  std::string colour = kBlue;
  std::string value_text;                  // printed after the bar ("" : none)
  std::vector<Segment> segments;           // a stacked bar instead of `value`
  std::string note;                        // no bar: this text, in red
  bool heading = false;                    // a group heading (the label, bold), no bar
  std::optional<double> band_lo, band_hi;  // a shaded band behind this row (a noise floor)
};
struct LegendEntry {
  std::string name, colour;
};
struct BarChart {
  std::vector<BarRow> rows;
  int label_width = 200;  // room for the labels, px
  int width = 560;        // the bars' room, px
  int bar_height = 22, gap = 10;
  std::optional<double> reference;  // a dashed vertical line at this value (parity)
  std::vector<LegendEntry> legend;  // below the bars
};

// Lines over x (linear or log2), y from 0; points may carry a whisker; dashed series are references.
struct Point {
  double x = 0, y = 0;
  std::optional<double> lo, hi;
};
struct Series {
  std::string name, colour;
  std::vector<Point> points;
  bool dashed = false;
};
struct LineChart {
  std::string x_label, y_label;
  std::vector<Series> series;
  bool log_x = false;
  std::string (*x_tick)(double x) = nullptr;  // tick text (default: the value)
};

// Points on two linear axes from 0, with a horizontal whisker, a colour and a marker each.
struct ScatterPoint {
  double x = 0, y = 0;
  std::optional<double> x_lo, x_hi;
  std::string colour = kBlue;
  bool square = false;
  std::string label;  // beside the point ("" : none)
};
struct Scatter {
  std::string x_label, y_label;
  std::vector<ScatterPoint> points;
  int size = 360;  // the plot's side, px
};

// Two orderings of the same items side by side, each item joined across (rank by throughput against
// rank by cost); highlighted items are drawn in red.
struct RankItem {
  int left_rank = 0, right_rank = 0;  // 1 = top
  std::string left_text, right_text;
  bool highlight = false;
};
struct RankChart {
  std::string left_title, right_title;
  std::vector<RankItem> items;
};

// A matrix of counts as shaded cells (a confusion matrix: true class by row, prediction by column),
// each cell's count printed and its shade its share of the row, so a row reads as recall.
struct Heatmap {
  std::string row_title, column_title;  // "true class", "predicted"
  std::vector<std::string> row_labels, column_labels;
  std::vector<std::vector<double>> values;  // [row][column]
  int cell = 44;                            // a cell's side, px
  int label_width = 110;                    // room for the row labels, px
};

// Lanes of intervals over time (a pipeline's stages: each forward and backward a box, the idle time
// between them blank), a lane per row top to bottom, the time axis shared.
struct Interval {
  double begin = 0, end = 0;
  std::string colour = kBlue;
  std::string label;  // inside the box where it fits ("" : none)
};
struct Lane {
  std::string label;
  std::vector<Interval> intervals;
};
struct Timeline {
  std::string title, x_label = "ms";
  std::vector<Lane> lanes;
  std::vector<LegendEntry> legend;  // below the lanes
  int label_width = 70, width = 600, lane_height = 22, gap = 6;
};

using Panel = std::variant<BarChart, LineChart, Scatter, RankChart, Heatmap, Timeline>;

struct Figure {
  std::string title;
  std::vector<Panel> panels;          // left to right
  std::vector<std::string> captions;  // below, one line each
};

std::string render(const Figure& figure);

}  // namespace trainlab::bench::chart
