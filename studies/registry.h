// Every study's report section, in the order REPORT.md presents them: bench_report iterates this
// list (and bench_ladder and the study drivers regenerate their report through it). A new study
// adds its section here, one line.
#pragma once

#include <vector>

#include "bench/report/section.h"

namespace trainlab::bench {

std::vector<SectionDef> report_sections();

}  // namespace trainlab::bench
