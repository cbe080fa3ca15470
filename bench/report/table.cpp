#include "bench/report/table.h"

#include <fmt/format.h>
#include <algorithm>
#include <sstream>

namespace trainlab::bench {

namespace {
// A markdown cell: a '|' would end it and a newline the row.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}
}  // namespace

std::string render_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                         bool markdown) {
  std::ostringstream out;
  if (markdown) {
    out << "|";
    for (const auto& h : head) out << " " << h << " |";
    out << "\n|";
    for (std::size_t i = 0; i < head.size(); ++i) out << "---|";
    out << "\n";
    for (const auto& r : rows) {
      out << "|";
      for (const auto& c : r) out << " " << cell(c) << " |";
      out << "\n";
    }
    return out.str();
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) width[i] = head[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i)
      out << fmt::format("{:<{}}", cells[i], i < width.size() ? width[i] : 0) << (i + 1 < cells.size() ? "  " : "\n");
  };
  line(head);
  for (const auto& r : rows) line(r);
  return out.str();
}

std::string svg_text(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace trainlab::bench
