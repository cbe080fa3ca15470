// Inside the bench layer: what every printed table and generated figure needs. A table as
// markdown or as aligned text, and text escaped for SVG.
#pragma once

#include <string>
#include <vector>

namespace trainlab::bench {

std::string render_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                         bool markdown);
std::string svg_text(const std::string& text);  // &, <, >, " escaped

}  // namespace trainlab::bench
