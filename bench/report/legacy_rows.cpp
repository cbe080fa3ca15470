#include "bench/report/legacy_rows.h"

#include <fmt/format.h>

#include "bench/report/section.h"

namespace trainlab::bench {

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

std::string legacy_line_figure(const std::string& title, const std::string& x_label, const std::string& y_label,
                               const std::vector<chart::Series>& series, bool log_x, std::string (*x_tick)(double x)) {
  chart::LineChart lines;
  lines.x_label = x_label;
  lines.y_label = y_label;
  lines.series = series;
  lines.log_x = log_x;
  lines.x_tick = x_tick;
  return chart::render(chart::Figure{title, {lines}, {}});
}

}  // namespace trainlab::bench
