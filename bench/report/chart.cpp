#include "bench/report/chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/report/table.h"

namespace trainlab::bench::chart {

namespace {

// The SVG primitives, in one place: every element a figure has goes through these.
class Canvas {
 public:
  void text(double x, double y, const std::string& s, const char* anchor = "start", const char* fill = nullptr,
            bool bold = false) {
    out_ << fmt::format(R"(<text x="{:.1f}" y="{:.1f}"{}{}{}>{}</text>)", x, y,
                        std::string(anchor) == "start" ? "" : fmt::format(R"( text-anchor="{}")", anchor),
                        fill ? fmt::format(R"( fill="{}")", fill) : "", bold ? R"( font-weight="bold")" : "",
                        svg_text(s))
         << "\n";
  }
  void vertical_text(double x, double y, const std::string& s) {
    out_
        << fmt::format(
               R"svg(<text x="{:.1f}" y="{:.1f}" transform="rotate(-90 {:.1f} {:.1f})" text-anchor="middle">{}</text>)svg",
               x, y, x, y, svg_text(s))
        << "\n";
  }
  void rect(double x, double y, double w, double h, const std::string& fill, double opacity = 1.0) {
    out_ << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"{}/>)", x, y,
                        std::max(0.0, w), std::max(0.0, h), fill,
                        opacity < 1 ? fmt::format(R"( opacity="{}")", opacity) : "")
         << "\n";
  }
  void frame(double x, double y, double w, double h) {
    out_ << fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#999"/>)", x,
                        y, w, h)
         << "\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            bool dashed = false) {
    out_ << fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"{}{}/>)", x1, y1, x2, y2,
                        stroke, width != 1 ? fmt::format(R"( stroke-width="{}")", width) : "",
                        dashed ? R"( stroke-dasharray="6 4")" : "")
         << "\n";
  }
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke, bool dashed) {
    std::string path;
    for (const auto& [x, y] : points) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", x, y);
    out_ << fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)", path, stroke,
                        dashed ? R"( stroke-dasharray="6 4")" : "")
         << "\n";
  }
  void circle(double x, double y, double r, const std::string& fill) {
    out_ << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}"/>)", x, y, r, fill) << "\n";
  }
  void title(const std::string& s) {
    out_ << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)", svg_text(s)) << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

struct Size {
  int width = 0, height = 0;
};

// ---- bars

Size size_of(const BarChart& c) {
  const int legend = c.legend.empty() ? 0 : 20 * static_cast<int>((c.legend.size() + 3) / 4) + 10;
  return {c.label_width + c.width + 100, static_cast<int>(c.rows.size()) * (c.bar_height + c.gap) + legend + 10};
}

void draw(Canvas& svg, const BarChart& c, int x0, int y0) {
  double top = 0;
  for (const BarRow& r : c.rows) {
    double total = r.value;
    if (!r.segments.empty()) {
      total = 0;
      for (const Segment& s : r.segments) total += s.value;
    }
    top = std::max({top, total, r.hi.value_or(0.0), r.band_hi.value_or(0.0), c.reference.value_or(0.0)});
  }
  top = top > 0 ? top * 1.08 : 1.0;
  const double left = x0 + c.label_width;
  const auto x = [&](double v) { return left + v / top * c.width; };
  const int h = c.bar_height;
  int y = y0;
  for (const BarRow& r : c.rows) {
    if (r.band_lo && r.band_hi)
      svg.rect(x(*r.band_lo), y, std::max(1.0, x(*r.band_hi) - x(*r.band_lo)), h + c.gap, "#f3d9a4", 0.7);
    if (r.heading) {
      svg.text(x0 + 10, y + h - 4, r.label, "start", nullptr, true);
      y += h + c.gap;
      continue;
    }
    svg.text(left - 8, y + h - 6, r.label, "end");
    if (!r.note.empty()) {
      svg.text(left + 6, y + h - 6, r.note, "start", kDarkRed);
    } else if (!r.segments.empty()) {
      double at = left;
      for (const Segment& s : r.segments) {
        const double w = s.value / top * c.width;
        if (w <= 0) continue;
        svg.rect(at, y, w, h, s.colour);
        at += w;
      }
      if (!r.value_text.empty()) svg.text(at + 4, y + h - 4, r.value_text);
    } else {
      svg.rect(left, y, x(r.value) - left, h, r.colour);
      if (r.lo && r.hi) {
        svg.line(x(*r.lo), y + h / 2.0, x(*r.hi), y + h / 2.0, "black");
        for (double v : {*r.lo, *r.hi}) svg.line(x(v), y + 4, x(v), y + h - 4, "black");
      }
      if (!r.value_text.empty()) svg.text(x(r.hi.value_or(r.value)) + 6, y + h - 6, r.value_text);
    }
    y += h + c.gap;
  }
  if (c.reference) svg.line(x(*c.reference), y0 - 6, x(*c.reference), y, kReference, 1, true);
  for (std::size_t k = 0; k < c.legend.size(); ++k) {
    const int lx = x0 + 10 + static_cast<int>(k % 4) * 140, ly = y + 14 + static_cast<int>(k / 4) * 16;
    svg.rect(lx, ly - 9, 10, 10, c.legend[k].colour);
    svg.text(lx + 14, ly, c.legend[k].name);
  }
}

// ---- lines

constexpr int kPlotWidth = 560, kPlotHeight = 300, kAxisLeft = 70;

Size size_of(const LineChart& c) {
  return {kAxisLeft + kPlotWidth + 30, kPlotHeight + 60 + 20 * static_cast<int>(c.series.size())};
}

void draw(Canvas& svg, const LineChart& c, int x0, int y0) {
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  std::vector<double> xs;
  for (const Series& s : c.series) {
    for (const Point& p : s.points) {
      x_min = std::min(x_min, p.x);
      x_max = std::max(x_max, p.x);
      y_max = std::max({y_max, p.y, p.hi.value_or(0.0)});
      xs.push_back(p.x);
    }
  }
  if (!(x_min < x_max)) {
    x_min = x_min == INFINITY ? 0 : x_min - 1;
    x_max = x_min + 2;
  }
  y_max = y_max > 0 ? y_max * 1.1 : 1.0;
  const int left = x0 + kAxisLeft, top = y0, width = kPlotWidth, height = kPlotHeight;
  const auto fx = [&](double x) {
    const double t = c.log_x ? (std::log2(x) - std::log2(x_min)) / (std::log2(x_max) - std::log2(x_min))
                             : (x - x_min) / (x_max - x_min);
    return left + t * width;
  };
  const auto fy = [&](double y) { return top + height - y / y_max * height; };
  svg.line(left, top + height, left + width, top + height, "black");
  svg.line(left, top, left, top + height, "black");
  for (int i = 0; i <= 4; ++i) {
    const double y = y_max * i / 4;
    svg.line(left, fy(y), left + width, fy(y), "#ddd");
    svg.text(left - 6, fy(y) + 4, fmt::format("{:.3g}", y), "end");
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  const std::size_t step = std::max<std::size_t>(1, xs.size() / 10);
  for (std::size_t i = 0; i < xs.size(); i += step)
    svg.text(fx(xs[i]), top + height + 16, c.x_tick ? c.x_tick(xs[i]) : fmt::format("{:g}", xs[i]), "middle");
  svg.text(left + width / 2.0, top + height + 36, c.x_label, "middle");
  svg.vertical_text(x0 + 14, top + height / 2.0, c.y_label);
  int ly = top + height + 56;
  for (const Series& s : c.series) {
    std::vector<std::pair<double, double>> path;
    for (const Point& p : s.points) path.emplace_back(fx(p.x), fy(p.y));
    svg.polyline(path, s.colour, s.dashed);
    for (const Point& p : s.points) {
      if (!s.dashed) svg.circle(fx(p.x), fy(p.y), 3, s.colour);
      if (p.lo && p.hi) svg.line(fx(p.x), fy(*p.lo), fx(p.x), fy(*p.hi), s.colour);
    }
    svg.line(left, ly - 4, left + 24, ly - 4, s.colour, 2, s.dashed);
    svg.text(left + 30, ly, s.name);
    ly += 20;
  }
}

// ---- points

Size size_of(const Scatter& c) { return {c.size + 90, c.size + 50}; }

void draw(Canvas& svg, const Scatter& c, int x0, int y0) {
  double x_top = 0, y_top = 0;
  for (const ScatterPoint& p : c.points) {
    x_top = std::max({x_top, p.x, p.x_hi.value_or(0.0)});
    y_top = std::max(y_top, p.y);
  }
  x_top = x_top > 0 ? x_top * 1.1 : 1.0;
  y_top = y_top > 0 ? y_top * 1.1 : 1.0;
  const int left = x0 + 50, top = y0 + 14, plot = c.size;
  svg.frame(left, top, plot, plot);
  const auto px = [&](double v) { return left + v / x_top * plot; };
  const auto py = [&](double v) { return top + plot - v / y_top * plot; };
  for (const ScatterPoint& p : c.points) {
    const double cx = px(p.x), cy = py(p.y);
    if (p.x_lo && p.x_hi) svg.line(px(*p.x_lo), cy, px(*p.x_hi), cy, p.colour);
    if (p.square) {
      svg.rect(cx - 4, cy - 4, 8, 8, p.colour);
    } else {
      svg.circle(cx, cy, 4, p.colour);
    }
    if (!p.label.empty()) svg.text(cx - 10, cy - 10, p.label, "start", "#555");
  }
  for (int t = 0; t <= 4; ++t) {  // ticks at a quarter of each range
    svg.text(px(x_top * t / 4), top + plot + 12, fmt::format("{:.0f}", x_top * t / 4), "middle", "#555");
    svg.text(left - 4, py(y_top * t / 4) + 4, fmt::format("{:.0f}", y_top * t / 4), "end", "#555");
  }
  svg.text(left, top - 6, c.y_label);
  svg.text(left, top + plot + 28, c.x_label);
}

// ---- two rankings

Size size_of(const RankChart& c) { return {780, 30 + static_cast<int>(c.items.size()) * 34 + 10}; }

void draw(Canvas& svg, const RankChart& c, int x0, int y0) {
  const int left = x0 + 230, right = x0 + 530, top = y0 + 20, step = 34;
  svg.text(left, y0 + 6, c.left_title, "middle", nullptr, true);
  svg.text(right, y0 + 6, c.right_title, "middle", nullptr, true);
  const auto y = [&](int rank) { return top + (rank - 1) * step + 12; };
  for (const RankItem& item : c.items) {
    svg.line(left + 8, y(item.left_rank), right - 8, y(item.right_rank), item.highlight ? kDarkRed : kBlue,
             item.highlight ? 3 : 1.5);
    svg.text(left - 8, y(item.left_rank) + 4, item.left_text, "end");
    svg.text(right + 8, y(item.right_rank) + 4, item.right_text);
  }
}

// ---- a matrix of counts

Size size_of(const Heatmap& c) {
  const int columns = static_cast<int>(c.column_labels.size()), rows = static_cast<int>(c.row_labels.size());
  return {c.label_width + columns * c.cell + 20, 50 + rows * c.cell + 20};
}

void draw(Canvas& svg, const Heatmap& c, int x0, int y0) {
  const int left = x0 + c.label_width, top = y0 + 50;
  svg.text(left + static_cast<double>(c.column_labels.size()) * c.cell / 2, y0 + 8, c.column_title, "middle", nullptr,
           true);
  svg.text(x0 + 4, y0 + 8, c.row_title, "start", nullptr, true);
  for (std::size_t j = 0; j < c.column_labels.size(); ++j) {
    // Column labels shortened to the cell's width (the row labels carry the full names).
    std::string label = c.column_labels[j];
    if (label.size() > 6) label = label.substr(0, 5) + ".";
    svg.text(left + (j + 0.5) * c.cell, top - 8, label, "middle", "#555");
  }
  for (std::size_t i = 0; i < c.row_labels.size() && i < c.values.size(); ++i) {
    const double y = top + static_cast<double>(i) * c.cell;
    svg.text(left - 6, y + c.cell / 2.0 + 4, c.row_labels[i], "end");
    double total = 0;
    for (double v : c.values[i]) total += v;
    for (std::size_t j = 0; j < c.values[i].size(); ++j) {
      const double x = left + static_cast<double>(j) * c.cell, share = total > 0 ? c.values[i][j] / total : 0;
      svg.rect(x, y, c.cell, c.cell, i == j ? kBlue : kRed, std::clamp(share, 0.0, 1.0));
      svg.frame(x, y, c.cell, c.cell);
      if (c.values[i][j] != 0)
        svg.text(x + c.cell / 2.0, y + c.cell / 2.0 + 4, fmt::format("{:g}", c.values[i][j]), "middle",
                 share > 0.5 ? "#fff" : nullptr);
    }
  }
}

// ---- lanes of intervals

Size size_of(const Timeline& c) {
  return {c.label_width + c.width + 20, 24 + static_cast<int>(c.lanes.size()) * (c.lane_height + c.gap) + 50};
}

void draw(Canvas& svg, const Timeline& c, int x0, int y0) {
  double end = 0;
  for (const Lane& lane : c.lanes)
    for (const Interval& i : lane.intervals) end = std::max(end, i.end);
  if (end <= 0) end = 1;
  const double left = x0 + c.label_width, top = y0 + 24, scale = c.width / end;
  svg.text(left, y0 + 8, c.title, "start", nullptr, true);
  for (std::size_t k = 0; k < c.lanes.size(); ++k) {
    const double y = top + static_cast<double>(k) * (c.lane_height + c.gap);
    svg.text(left - 6, y + c.lane_height / 2.0 + 4, c.lanes[k].label, "end");
    svg.frame(left, y, c.width, c.lane_height);
    for (const Interval& i : c.lanes[k].intervals) {
      const double x = left + i.begin * scale, w = (i.end - i.begin) * scale;
      svg.rect(x, y, w, c.lane_height, i.colour);
      if (!i.label.empty() && w >= 7.0 * static_cast<double>(i.label.size()))
        svg.text(x + w / 2, y + c.lane_height / 2.0 + 4, i.label, "middle", "#fff");
    }
  }
  const double axis = top + static_cast<double>(c.lanes.size()) * (c.lane_height + c.gap) + 4;
  for (int t = 0; t <= 4; ++t) {
    const double v = end * t / 4;
    svg.line(left + v * scale, axis, left + v * scale, axis + 4, "#555");
    svg.text(left + v * scale, axis + 16, fmt::format("{:.3g}", v), "middle", "#555");
  }
  svg.text(left + c.width, axis + 30, c.x_label, "end", "#555");
  double lx = left;
  for (const LegendEntry& e : c.legend) {
    svg.rect(lx, axis + 22, 12, 12, e.colour);
    svg.text(lx + 16, axis + 32, e.name);
    lx += 28 + 7.0 * static_cast<double>(e.name.size());
  }
}

}  // namespace

std::string render(const Figure& figure) {
  constexpr int kHead = 40, kPanelGap = 20, kCaption = 16;
  int width = 0, height = 0;
  for (const Panel& panel : figure.panels) {
    const Size s = std::visit([](const auto& p) { return size_of(p); }, panel);
    width += s.width + (width > 0 ? kPanelGap : 0);
    height = std::max(height, s.height);
  }
  width = std::max(width, 400);
  const int total_height = kHead + height + kCaption * static_cast<int>(figure.captions.size()) + 20;
  Canvas svg;
  svg.title(figure.title);
  int x = 0;
  for (const Panel& panel : figure.panels) {
    const Size s = std::visit([](const auto& p) { return size_of(p); }, panel);
    std::visit([&](const auto& p) { draw(svg, p, x, kHead); }, panel);
    x += s.width + kPanelGap;
  }
  int y = kHead + height + kCaption;
  for (const std::string& caption : figure.captions) {
    svg.text(10, y, caption, "start", "#555");
    y += kCaption;
  }
  return fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
             width, total_height) +
         "\n" + svg.str() + "</svg>\n";
}

}  // namespace trainlab::bench::chart
