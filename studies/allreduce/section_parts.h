// What the all-reduce section and the collectives section (studies/allreduce/) draw with alike.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/report/chart.h"
#include "studies/allreduce/rows.h"

namespace trainlab::bench {

using BySize = std::map<std::int64_t, const AllreduceRow*>;
// "4K", "256M" on a log axis.
std::string bytes_tick(double x);
// Per algorithm: busbw (bytes / time x `factor`) at the median, whiskers at the slowest and fastest
// iteration; and the single-core memcpy line.
std::vector<chart::Series> busbw_series(const std::map<std::string, BySize>& by, double factor, double memcpy_gbps);

}  // namespace trainlab::bench
