#include "bench/report_families.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/comm_bench.h"
#include "bench/render.h"
#include "bench/stats.h"

namespace trainlab::bench {

namespace {

// A byte count read from a row as a double, clamped into int64's range (a damaged row is drawn, never UB).
std::int64_t as_bytes(double x) { return std::isfinite(x) ? static_cast<std::int64_t>(std::clamp(x, 0.0, 4e18)) : 0; }
std::string bytes_tick(double x) { return human_bytes(as_bytes(x)); }
std::string world_tick(double x) { return fmt::format("{:.0f}", x); }

std::string range(const Summary& s, const char* format) {
  return fmt::format(fmt::runtime(std::string(format) + " (" + format + "-" + format + ")"), s.median, s.min, s.max);
}

// A {"median", "min", "max"} summary as compare_torch.py writes it (no mean or std).
Summary median_range(const json& j) {
  Summary s;
  s.median = j.at("median");
  s.min = j.at("min");
  s.max = j.at("max");
  s.n = j.value("n", 0);
  return s;
}

}  // namespace

std::pair<std::string, std::vector<json>> latest_run_of(const std::vector<json>& rows, const std::string& kind,
                                                        bool (*accept)(const json& row)) {
  std::string run_id;
  for (const auto& row : rows)
    if (row.value("kind", "") == kind && (!accept || accept(row))) run_id = row.value("run_id", "");
  std::vector<json> out;
  for (const auto& row : rows)
    if (!run_id.empty() && row.value("run_id", "") == run_id) out.push_back(row);
  return {run_id, out};
}

std::int64_t int_at(const json& object, const char* key, std::int64_t fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number_integer()) return fallback;
  const auto v = object.at(key).get<std::int64_t>();
  return v >= -(std::int64_t{1} << 40) && v <= (std::int64_t{1} << 40) ? v : fallback;
}

std::string text_at(const json& row, const char* pointer) {
  const json::json_pointer p(pointer);
  return row.contains(p) && row.at(p).is_string() ? row.at(p).get<std::string>() : std::string("?");
}

std::string measured_on(const json& row) {
  return fmt::format("{} ({}, {} threads; engine {}; timer {})", text_at(row, "/device/name"), text_at(row, "/backend"),
                     row.value("threads", 0), text_at(row, "/versions/engine"), text_at(row, "/timer"));
}

std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series, bool log_x, std::string (*x_tick)(double)) {
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  std::vector<double> xs;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      x_min = std::min(x_min, p.x);
      x_max = std::max(x_max, p.x);
      y_max = std::max({y_max, p.y, p.hi});
      xs.push_back(p.x);
    }
  }
  if (!(x_min < x_max)) {
    x_min = x_min == INFINITY ? 0 : x_min - 1;
    x_max = x_min + 2;
  }
  y_max = y_max > 0 ? y_max * 1.1 : 1.0;
  const int left = 70, top = 40, width = 560, height = 300, legend = 20 * static_cast<int>(series.size());
  const auto fx = [&](double x) {
    const double t = log_x ? (std::log2(x) - std::log2(x_min)) / (std::log2(x_max) - std::log2(x_min))
                           : (x - x_min) / (x_max - x_min);
    return left + t * width;
  };
  const auto fy = [&](double y) { return top + height - y / y_max * height; };
  std::ostringstream svg;
  svg << fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
             left + width + 30, top + height + 60 + legend)
      << "\n";
  svg << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)", svg_text(title)) << "\n";
  svg << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>)", left, top + height, left + width,
                     top + height)
      << "\n";
  svg << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>)", left, top, left, top + height)
      << "\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = y_max * i / 4;
    svg << fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)", left, fy(y), left + width,
                       fy(y))
        << fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end">{:.3g}</text>)", left - 6, fy(y) + 4, y) << "\n";
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  const std::size_t step = std::max<std::size_t>(1, xs.size() / 10);
  for (std::size_t i = 0; i < xs.size(); i += step) {
    svg << fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)", fx(xs[i]), top + height + 16,
                       svg_text(x_tick ? x_tick(xs[i]) : fmt::format("{:g}", xs[i])))
        << "\n";
  }
  svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", left + width / 2, top + height + 36,
                     svg_text(x_label))
      << "\n";
  svg << fmt::format(R"svg(<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>)svg",
                     top + height / 2, top + height / 2, svg_text(y_label))
      << "\n";
  int ly = top + height + 56;
  for (const auto& s : series) {
    std::string path;
    for (const auto& p : s.points) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", fx(p.x), fy(p.y));
    svg << fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)", path, s.colour,
                       s.dashed ? R"( stroke-dasharray="6 4")" : "")
        << "\n";
    for (const auto& p : s.points) {
      if (!s.dashed)
        svg << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", fx(p.x), fy(p.y), s.colour);
      if (p.lo >= 0 && p.hi >= 0)
        svg << fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>)", fx(p.x), fy(p.lo),
                           fx(p.x), fy(p.hi), s.colour);
    }
    svg << "\n"
        << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)", left, ly - 4,
                       left + 24, ly - 4, s.colour, s.dashed ? R"( stroke-dasharray="6 4")" : "")
        << fmt::format(R"(<text x="{}" y="{}">{}</text>)", left + 30, ly, svg_text(s.name)) << "\n";
    ly += 20;
  }
  svg << "</svg>\n";
  return svg.str();
}

// ---------------------------------------------------------------------------------------------
// all-reduce: busbw against size

namespace {
bool from_bench_allreduce(const json& row) { return row.value("tool", "") != "bench_buckets"; }
}  // namespace

std::optional<ReportSection> allreduce_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "allreduce", from_bench_allreduce);
  if (run_id.empty()) return std::nullopt;
  // Per algorithm, per size: busbw at the median, and at the slowest and fastest iteration.
  std::map<std::string, std::map<std::int64_t, json>> by;
  double memcpy_gbps = 0;
  int ranks = 0;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "allreduce" || row.value("status", "") != "ok") continue;
    if (!row.at("config").at("bytes").is_number_integer()) continue;  // a damaged row is passed over
    by[row.at("config").at("algorithm").get<std::string>()][row.at("config").at("bytes").get<std::int64_t>()] = row;
    memcpy_gbps = row.value("memcpy_gbps", memcpy_gbps);
    ranks = static_cast<int>(int_at(row.at("config"), "ranks", 0));
  }
  if (by.empty()) return std::nullopt;
  const double factor = ranks > 0 ? 2.0 * (ranks - 1) / ranks : 1.0;
  std::vector<ChartSeries> series;
  const std::map<std::string, std::string> colours = {{"ring", "#3a7ca5"}, {"native", "#d1495b"}};
  for (const auto& [algorithm, sizes] : by) {
    ChartSeries s{algorithm == "native" ? "native (the MPI library's all-reduce)" : algorithm + " (trainlab)",
                  colours.count(algorithm) ? colours.at(algorithm) : "#66a182",
                  {},
                  false};
    for (const auto& [bytes, row] : sizes) {
      const Summary t = stats_from(row.at("stats"));
      const auto bus = [&](double seconds) { return static_cast<double>(bytes) / seconds * 1e-9 * factor; };
      s.points.push_back({static_cast<double>(bytes), bus(t.median), bus(t.max), bus(t.min)});
    }
    series.push_back(s);
  }
  if (memcpy_gbps > 0) {
    ChartSeries line{fmt::format("single-core memcpy ({:.2f} GB/s)", memcpy_gbps), "#888", {}, true};
    for (const auto& [bytes, row] : by.begin()->second)
      line.points.push_back({static_cast<double>(bytes), memcpy_gbps});
    series.push_back(line);
  }
  std::vector<std::vector<std::string>> table;
  if (by.count("ring") && by.count("native")) {
    for (const auto& [bytes, ring] : by.at("ring")) {
      if (!by.at("native").count(bytes)) continue;
      const json& native = by.at("native").at(bytes);
      const Summary r = stats_from(ring.at("stats")), n = stats_from(native.at("stats"));
      const double effect = (r.median / n.median - 1) * 100;
      std::optional<Calibration> floor;
      if (native.contains("noise_floor_percent")) {
        Calibration c;
        c.noise_floor_percent = native.at("noise_floor_percent");
        c.valid = true;
        floor = c;
      }
      table.push_back({human_bytes(bytes), fmt::format("{:.2f}", ring.value("busbw_gbps", 0.0)),
                       fmt::format("{:.2f}", native.value("busbw_gbps", 0.0)),
                       fmt::format("{:.2f}", r.median / n.median),
                       floor ? fmt::format("{:+.1f}% ({} the noise floor)", effect, floor_multiple_text(effect, floor))
                             : fmt::format("{:+.1f}% (no noise floor recorded)", effect),
                       separable(r, n) ? "yes" : "no"});
    }
  }
  ReportSection section;
  section.first_row = rows.front();
  const std::string figure = "figures/allreduce_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## All-reduce: bus bandwidth against size\n\nRun `{}` of `bench_allreduce` on {}, {} ranks, {}: every size "
      "the ring and the library's own all-reduce alternating, each time the slowest rank's; busbw = bytes / time x "
      "2(P-1)/P (nccl-tests' definition); the dashed line is one core's memcpy. Whiskers: busbw at the slowest and "
      "fastest iteration. The noise floor is the native all-reduce's even iterations against its odd ones.\n\n",
      run_id, measured_on(rows.front()), ranks, text_at(rows.front(), "/config/communicator"));
  md << render_table({"size", "ring busbw GB/s", "native busbw GB/s", "time ratio", "ring against native", "separable"},
                     table, true);
  md << "\n![all-reduce busbw against size](" << figure << ")\n";
  section.markdown = md.str();
  // The README quotes every fourth size and the largest.
  std::vector<std::vector<std::string>> some;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (i % 4 == 0 || i + 1 == table.size()) some.push_back(table[i]);
  section.marker = "allreduce";
  section.readme_intro = fmt::format("from run `{}` on {}, {} ranks", run_id, measured_on(rows.front()), ranks);
  section.readme_table = render_table(
      {"size", "ring busbw GB/s", "native busbw GB/s", "time ratio", "ring against native", "separable"}, some, true);
  section.figures.emplace_back(figure, line_chart_svg("all-reduce bus bandwidth (run " + run_id + ")", "message size",
                                                      "busbw GB/s", series, true, bytes_tick));
  return section;
}

// ---------------------------------------------------------------------------------------------
// the bucket sweep against its fitted model

std::optional<ReportSection> buckets_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "allreduce_buckets");
  if (run_id.empty()) return std::nullopt;
  ChartSeries measured{"measured (median; whisker min-max)", "#3a7ca5", {}, false};
  ChartSeries model{"alpha-beta model fitted in the same run", "#d1495b", {}, false};
  ChartSeries ideal{"ideal: the whole buffer's bandwidth term", "#888", {}, true};
  std::vector<std::vector<std::string>> table;
  const json* first = nullptr;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "allreduce_buckets" || row.value("status", "") != "ok") continue;
    if (!first) first = &row;
    const Summary s = stats_from(row.at("stats"));
    const double bucket = row.at("config").at("bucket_bytes").get<double>();
    const double predicted = row.at("predicted_s"), ideal_s = row.at("ideal_s");
    measured.points.push_back({bucket, 1e3 * s.median, 1e3 * s.min, 1e3 * s.max});
    model.points.push_back({bucket, 1e3 * predicted});
    ideal.points.push_back({bucket, 1e3 * ideal_s});
    table.push_back({human_bytes(as_bytes(bucket)), fmt::format("{}", int_at(row.at("config"), "buckets", 0)),
                     range(Summary{s.median * 1e3, 0, 0, s.min * 1e3, s.max * 1e3, s.n}, "{:.3f}"),
                     fmt::format("{:.3f}", 1e3 * predicted), fmt::format("{:+.0f}%", 100 * (predicted / s.median - 1)),
                     fmt::format("{:+.0f}%", 100 * (s.median / ideal_s - 1))});
  }
  if (!first) return std::nullopt;
  ReportSection section;
  section.first_row = *first;
  const std::string figure = "figures/buckets_" + run_id + ".svg";
  std::ostringstream md;
  const json& config = first->at("config");
  md << fmt::format(
      "\n## Bucket sweep against the alpha-beta model\n\nRun `{}` of `bench_buckets` on {}: a {} gradient of {} cut "
      "into buckets of each size and all-reduced ({} ranks, {}); the model is fitted to single all-reduces measured "
      "in the same run.\n\n",
      run_id, measured_on(*first), config.value("gradient", std::string("?")),
      human_bytes(int_at(config, "total_bytes", 0)), int_at(config, "ranks", 0),
      config.value("algorithm", std::string("?")));
  md << render_table({"bucket", "buckets", "measured ms median (min-max)", "predicted ms", "model error", "over ideal"},
                     table, true);
  md << "\n![bucket sweep against the model](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "buckets";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(*first);
  section.readme_table = render_table(
      {"bucket", "buckets", "measured ms median (min-max)", "predicted ms", "model error", "over ideal"}, table, true);
  section.figures.emplace_back(
      figure, line_chart_svg("bucket sweep against the fitted model (run " + run_id + ")", "bucket size",
                             "all-reduce time of the whole gradient, ms", {measured, model, ideal}, true, bytes_tick));
  return section;
}

// ---------------------------------------------------------------------------------------------
// weak and strong efficiency against world size, with the PyTorch DDP peer

namespace {
bool is_weak_or_strong(const json& row) {
  if (!row.contains("config") || !row.at("config").is_object()) return false;
  const std::string mode = row.at("config").value("mode", "");
  return mode == "weak" || mode == "strong";
}

// Per-round efficiency against world 1: values[w][i] / (w * values[1][i]).
std::map<int, Summary> efficiencies(const std::map<int, std::vector<double>>& values) {
  std::map<int, Summary> out;
  if (!values.count(1)) return out;
  const auto& one = values.at(1);
  for (const auto& [w, v] : values) {
    std::vector<double> e;
    for (std::size_t i = 0; i < std::min(v.size(), one.size()); ++i) e.push_back(v[i] / (w * one[i]));
    if (!e.empty()) out[w] = summarize(e);
  }
  return out;
}
}  // namespace

std::optional<ReportSection> scaling_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "scaling", is_weak_or_strong);
  if (run_id.empty()) return std::nullopt;
  // The efficiency is drawn at the lowest decode cost the run measured (0 with the ablation), unbound.
  std::int64_t decode = -1;
  for (const auto& row : rows)
    if (row.value("kind", "") == "scaling" && is_weak_or_strong(row)) {
      const std::int64_t d = int_at(row.at("config"), "decode_cost", 0);
      decode = decode < 0 ? d : std::min(decode, d);
    }
  std::map<std::string, std::map<int, std::vector<double>>> samples;  // mode -> world -> per round
  const json* first = nullptr;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "scaling" || row.value("status", "") != "ok" || !is_weak_or_strong(row)) continue;
    const json& c = row.at("config");
    if (int_at(c, "decode_cost", 0) != decode || c.value("no_sync", false) || c.value("bind", "none") != "none")
      continue;
    if (!first) first = &row;
    const std::int64_t world = int_at(c, "world", 0);
    if (world < 1 || world > (1 << 20)) continue;  // a damaged row is passed over
    samples[c.at("mode").get<std::string>()][static_cast<int>(world)].push_back(row.at("samples_per_s"));
  }
  if (!first) return std::nullopt;
  // The peer: every PyTorch variant per round; the best by median at the largest world is drawn.
  std::map<std::string, std::map<int, std::vector<double>>> peer;  // variant -> world -> per round
  std::vector<std::string> order;
  for (const auto& row : rows) {
    if (row.value("kind", "") != "scaling_peer" || !row.contains("peer")) continue;
    const int w = static_cast<int>(int_at(row.at("config"), "world", 0));
    const json& p = row.at("peer");
    if (p.contains("variants")) {
      for (const auto& [variant, result] : p.at("variants").items()) {
        if (std::find(order.begin(), order.end(), variant) == order.end()) order.push_back(variant);
        peer[variant][w].push_back(result.at("samples_per_s"));
      }
    } else if (p.contains("samples_per_s")) {
      const std::string variant = p.value("variant", std::string("the recorded variant"));
      if (std::find(order.begin(), order.end(), variant) == order.end()) order.push_back(variant);
      peer[variant][w].push_back(p.at("samples_per_s"));
    }
  }
  std::vector<ChartSeries> series;
  std::vector<std::vector<std::string>> table;
  const std::map<std::string, std::string> colours = {{"weak", "#3a7ca5"}, {"strong", "#d1495b"}};
  for (const auto& [mode, by_world] : samples) {
    ChartSeries s{"trainlab, " + mode + " scaling", colours.at(mode), {}, false};
    for (const auto& [w, e] : efficiencies(by_world)) {
      s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
      table.push_back({"trainlab " + mode, std::to_string(w), range(summarize(by_world.at(w)), "{:.1f}"),
                       fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max)});
    }
    series.push_back(s);
  }
  std::string peer_note;
  if (!order.empty()) {
    int top_world = 1;
    for (const auto& [variant, by_world] : peer)
      for (const auto& [w, v] : by_world) top_world = std::max(top_world, w);
    std::vector<std::vector<double>> at_top;
    for (const auto& v : order) at_top.push_back(peer[v].count(top_world) ? peer[v][top_world] : std::vector<double>{});
    const std::string best = order[best_by_median(order, at_top)];
    ChartSeries s{"PyTorch DDP (gloo), weak, best variant: " + best, "#66a182", {}, false};
    for (const auto& [w, e] : efficiencies(peer[best])) {
      s.points.push_back({static_cast<double>(w), 100 * e.median, 100 * e.min, 100 * e.max});
      table.push_back({"PyTorch DDP " + best, std::to_string(w), range(summarize(peer[best].at(w)), "{:.1f}"),
                       fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * e.median, 100 * e.min, 100 * e.max)});
    }
    series.push_back(s);
    peer_note = fmt::format(
        " The PyTorch DDP peer measured {} variant(s) each round; the best by median at world {} "
        "is drawn.",
        order.size(), top_world);
  }
  ChartSeries ideal{"ideal (100%)", "#888", {}, true};
  for (const auto& [w, v] : samples.begin()->second) ideal.points.push_back({static_cast<double>(w), 100});
  series.push_back(ideal);
  ReportSection section;
  section.first_row = *first;
  const std::string figure = "figures/scaling_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Weak and strong scaling efficiency\n\nRun `{}` of `bench_scaling` on {}, decode cost {}, unbound: "
      "efficiency = samples/s at world W / (W x samples/s at world 1), per round (each round measures every world), "
      "median (min-max) over rounds.{}\n\n",
      run_id, measured_on(*first), decode, peer_note);
  md << render_table({"what", "world", "samples/s median (min-max)", "efficiency median (min-max)"}, table, true);
  md << "\n![efficiency against world size](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "scaling";
  section.readme_intro = fmt::format("from run `{}` on {}, decode cost {}", run_id, measured_on(*first), decode);
  section.readme_table =
      render_table({"what", "world", "samples/s median (min-max)", "efficiency median (min-max)"}, table, true);
  section.figures.emplace_back(figure, line_chart_svg("scaling efficiency against world size (run " + run_id + ")",
                                                      "world size (ranks)", "efficiency %", series, false, world_tick));
  return section;
}

// ---------------------------------------------------------------------------------------------
// compare_torch: each trainlab configuration's ratio to the best PyTorch variant, per round

std::optional<ReportSection> compare_torch_section(const std::vector<json>& all) {
  const auto [run_id, rows] = latest_run_of(all, "compare_torch");
  if (run_id.empty()) return std::nullopt;
  std::vector<const json*> configs;
  for (const auto& row : rows)
    if (row.value("kind", "") == "compare_torch" && row.contains("ratio_per_round")) configs.push_back(&row);
  if (configs.empty()) return std::nullopt;
  double top = 1.0;
  for (const json* row : configs)
    for (double r : row->at("ratio_per_round").get<std::vector<double>>()) top = std::max(top, r);
  top *= 1.1;
  const int left = 380, width = 420, bar = 18, gap = 8, head = 40;
  const int height = head + static_cast<int>(configs.size()) * (bar + gap) + 50;
  const auto x = [&](double v) { return left + v / top * width; };
  std::ostringstream svg;
  svg << fmt::format(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
             left + width + 80, height)
      << "\n"
      << fmt::format(R"(<text x="10" y="22" font-size="14" font-weight="bold">{}</text>)",
                     svg_text("trainlab against the best PyTorch variant per dtype (run " + run_id + ")"))
      << "\n";
  std::vector<std::vector<std::string>> table;
  int y = head;
  for (const json* row : configs) {
    const Summary r = summarize(row->at("ratio_per_round").get<std::vector<double>>());
    const std::string name = row->value("config_name", std::string("?"));
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 8, y + bar - 5, svg_text(name))
        << fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"/>)", left, y, x(r.median) - left,
                       bar, r.median >= 1 ? "#3a7ca5" : "#d1495b")
        << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="black"/>)", x(r.min), y + bar / 2,
                       x(r.max), y + bar / 2)
        << fmt::format(R"(<text x="{:.1f}" y="{}">{:.2f}x</text>)", x(r.max) + 6, y + bar - 5, r.median) << "\n";
    table.push_back({name, row->value("peer", std::string("?")),
                     range(median_range(row->at("samples_per_s")), "{:.0f}"),
                     range(median_range(row->at("peer_samples_per_s")), "{:.0f}"),
                     fmt::format("{:.2f}x ({:.2f}-{:.2f})", r.median, r.min, r.max)});
    y += bar + gap;
  }
  svg << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#888" stroke-dasharray="6 4"/>)", x(1.0),
                     head - 6, x(1.0), y)
      << fmt::format(R"(<text x="{}" y="{}" fill="#555">ratio, samples/s (bar: median of the per-round ratios; )"
                     R"(whisker: their min-max; dashed: parity)</text>)",
                     left - 200, y + 20)
      << "\n</svg>\n";
  ReportSection section;
  section.first_row = *configs.front();
  const std::string figure = "figures/compare_torch_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Against PyTorch\n\nRun `{}` (`{}`) on {}, PyTorch {}, batch {}: every configuration its own process, "
      "all of them in turn each round; each trainlab configuration against the best PyTorch variant of its dtype "
      "in this run (by median), the ratio per round.\n\n",
      run_id, configs.front()->value("command", std::string("compare_torch")), measured_on(*configs.front()),
      text_at(*configs.front(), "/versions/torch"), int_at(*configs.front(), "batch", 0));
  md << render_table({"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"},
                     table, true);
  md << "\n![trainlab against the best PyTorch variant](" << figure << ")\n";
  section.markdown = md.str();
  section.marker = "torch_ratios";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(*configs.front());
  section.readme_table = render_table(
      {"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"}, table, true);
  section.figures.emplace_back(figure, svg.str());
  return section;
}

}  // namespace trainlab::bench
