// Reading rows by key, for the sections not yet on typed rows (bench/measure/row.h). Each study's
// section moves to its typed rows; this file goes when the last one has.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/report/chart.h"

namespace trainlab::bench {

// The latest run of `kind` rows in the ledger that `accept` keeps ("" when there is none), and every
// row of that run.
std::pair<std::string, std::vector<json>> latest_run_of(const std::vector<json>& rows, const std::string& kind,
                                                        bool (*accept)(const json& row) = nullptr);
// An integer field of an object, or `fallback` where it is absent, not an integer or beyond +-2^40.
std::int64_t int_at(const json& object, const char* key, std::int64_t fallback);
// A text field of a row by JSON pointer, or "?" where it is absent or not text.
std::string text_at(const json& row, const char* pointer);
// "AMD EPYC (onednn, 2 threads; engine abc; timer steady_clock)".
std::string measured_on(const json& row);
// A figure of one line chart.
std::string legacy_line_figure(const std::string& title, const std::string& x_label, const std::string& y_label,
                               const std::vector<chart::Series>& series, bool log_x,
                               std::string (*x_tick)(double x) = nullptr);

}  // namespace trainlab::bench
