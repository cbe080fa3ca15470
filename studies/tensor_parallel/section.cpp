// The tensor-parallel study's report section: per model and rank count (the latest run of each),
// the split step against the unsplit one and its all-reduces against the alpha-beta prediction.
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "bench/report/table.h"
#include "studies/tensor_parallel/rows.h"
#include "studies/tensor_parallel/tensor_parallel_study.h"

namespace trainlab::bench {

namespace {

std::string ms_range(const Summary& s) {
  return fmt::format("{:.2f} ({:.2f}-{:.2f})", 1e3 * s.median, 1e3 * s.min, 1e3 * s.max);
}

std::optional<ReportSection> tensor_parallel_section(const SectionInput& in) {
  // The latest ok row of each model and rank count (the ledger is in time order).
  std::map<std::pair<std::string, int>, TensorParallelRow> latest;
  for (auto& row : in.read<TensorParallelRow>())
    if (row.header.ok()) latest[{row.config.model, row.config.ranks}] = row;
  if (latest.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> table;
  const TensorParallelRow* newest = nullptr;
  for (const auto& [key, row] : latest) {
    if (!newest || row.header.run_id > newest->header.run_id) newest = &row;
    const double transfer = row.comm_transfer_s.median;
    table.push_back(
        {row.config.model + (row.config.fuse ? ", fused" : ""), fmt::format("{}", row.config.ranks),
         fmt::format("{}", row.config.batch), ms_range(row.stats),
         fmt::format("{}: {}", row.baseline_threads == 1 ? "1 thread" : fmt::format("{} threads", row.baseline_threads),
                     ms_range(row.baseline)),
         fmt::format("{:.2f}x", row.speedup),
         fmt::format("{} ({:.2f} MiB; {})", row.allreduces, static_cast<double>(row.allreduce_bytes) / (1 << 20),
                     row.algorithms),
         fmt::format("{:.2f} ({:.0f}%): {:.2f} + {:.2f}", 1e3 * row.comm_s.median, 100 * row.comm_share,
                     1e3 * row.comm_wait_s.median, 1e3 * transfer),
         fmt::format("{:.2f} / {:.2f}", 1e3 * row.standalone_comm_s, 1e3 * row.standalone_warm_comm_s),
         fmt::format("{:.2f} ({:.2f}x)", 1e3 * row.predicted_comm_s,
                     transfer > 0 ? row.predicted_comm_s / transfer : 0.0),
         fmt::format("{:.1f} us, {:.2f} GB/s ({:.0f}%)", 1e6 * row.alpha_s, 1e-9 * row.bandwidth_Bps,
                     100 * row.fit_max_residual),
         row.header.run_id});
  }
  ReportSection section = section_of("tensor-parallel", newest->header.run_id, newest->header.env);
  const std::vector<std::string> head = {"model",
                                         "ranks",
                                         "batch",
                                         "split step ms median (min-max)",
                                         "unsplit, one process",
                                         "speedup",
                                         "all-reduces a step",
                                         "in the step ms (share): waiting + transfer",
                                         "alone ms, cold / warm",
                                         "predicted ms (/ transfer)",
                                         "alpha, B (fit's max residual)",
                                         "run"};
  std::ostringstream md;
  md << fmt::format(
      "\n## Tensor parallelism: the split step and its all-reduces\n\n`bench_tensor_parallel` on {}: Megatron's split "
      "(the GPT's heads and MLP, SmallCNN's classifier, the ResNet's head) over every rank, each rank the whole "
      "batch, interleaved step by step with the unsplit model in one process on the same cores. The all-reduces "
      "sit on the critical path: their seconds in the step, split into waiting for the last rank to arrive and the "
      "transfer after it; the same sizes all-reduced alone, cold (walking through 64 MiB of buffers) and warm (one "
      "buffer); and the alpha-beta prediction with alpha and B fitted to this run's cold all-reduces alone from 16K "
      "to 16M, each algorithm by its own terms. The latest run of each model and rank count.\n\n",
      measured_on(newest->header.env));
  md << render_table(head, table, true);
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true);
  return section;
}

}  // namespace

SectionDef tensor_parallel_report_section() { return {"tensor-parallel", tensor_parallel_section}; }

}  // namespace trainlab::bench
