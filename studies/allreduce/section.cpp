// The all-reduce study's report section: bus bandwidth against size, the ring against the library's own.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "bench/measure/comm_bench.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/rows.h"
#include "studies/allreduce/section_parts.h"

namespace trainlab::bench {

// A byte count read from a row as a double, clamped into int64's range (a damaged row is drawn, never UB).
std::string bytes_tick(double x) {
  return human_bytes(std::isfinite(x) ? static_cast<std::int64_t>(std::clamp(x, 0.0, 4e18)) : 0);
}

std::vector<chart::Series> busbw_series(const std::map<std::string, BySize>& by, double factor, double memcpy_gbps) {
  std::vector<chart::Series> series;
  const std::map<std::string, std::string> colours = {{"ring", chart::kBlue}, {"native", chart::kRed}};
  for (const auto& [algorithm, sizes] : by) {
    chart::Series s{algorithm == "native" ? "native (the MPI library's own)" : algorithm + " (trainlab)",
                    colours.count(algorithm) ? colours.at(algorithm) : "#66a182",
                    {},
                    false};
    for (const auto& [bytes, row] : sizes) {
      const Summary& t = row->stats;
      const double size = static_cast<double>(bytes);  // a structured binding: clang 14 cannot capture it
      const auto bus = [&](double seconds) { return size / seconds * 1e-9 * factor; };
      s.points.push_back({static_cast<double>(bytes), bus(t.median), bus(t.max), bus(t.min)});
    }
    series.push_back(s);
  }
  if (memcpy_gbps > 0) {
    chart::Series line{fmt::format("single-core memcpy ({:.2f} GB/s)", memcpy_gbps), chart::kReference, {}, true};
    for (const auto& [bytes, row] : by.begin()->second)
      line.points.push_back({static_cast<double>(bytes), memcpy_gbps, {}, {}});
    series.push_back(line);
  }
  return series;
}

namespace {

// A line per size both algorithms measured: the ring against native in units of native's noise floor.
std::vector<std::vector<std::string>> ring_against_native(const std::map<std::string, BySize>& by) {
  std::vector<std::vector<std::string>> table;
  if (!by.count("ring") || !by.count("native")) return table;
  for (const auto& [bytes, ring] : by.at("ring")) {
    if (!by.at("native").count(bytes)) continue;
    const AllreduceRow& native = *by.at("native").at(bytes);
    const Summary &r = ring->stats, &n = native.stats;
    const double effect = (r.median / n.median - 1) * 100;
    std::optional<Calibration> floor;
    if (native.noise_floor_percent) {
      Calibration c;
      c.noise_floor_percent = *native.noise_floor_percent;
      c.valid = true;
      floor = c;
    }
    table.push_back({human_bytes(bytes), fmt::format("{:.2f}", ring->busbw_gbps.value_or(0.0)),
                     fmt::format("{:.2f}", native.busbw_gbps.value_or(0.0)), fmt::format("{:.2f}", r.median / n.median),
                     floor ? fmt::format("{:+.1f}% ({} the noise floor)", effect, floor_multiple_text(effect, floor))
                           : fmt::format("{:+.1f}% (no noise floor recorded)", effect),
                     separable(r, n) ? "yes" : "no"});
  }
  return table;
}

// ---- a variant sweep (bench/allreduce_variants.py): several processes, one per MPI variant and round

std::string variant_name(const AllreduceConfig& c) {
  return "mpi " + c.mpi_algorithm.value_or("?") + ", malloc " + c.malloc.value_or("?");
}

// One variant at one size: each of its processes' medians (one per round), MPI's and each
// hand-written algorithm's timed beside it in the same process.
struct VariantAtSize {
  std::map<int, double> native;                       // round -> median seconds
  std::map<std::string, std::map<int, double>> hand;  // algorithm -> round -> median seconds
  Summary native_stats() const { return summary_of(native); }
  // The hand-written algorithm with the lowest median in these processes ("" when none ran).
  std::string best_hand() const {
    std::string best;
    double m = 0;
    for (const auto& [algorithm, rounds] : hand) {
      const double x = summary_of(rounds).median;
      if (best.empty() || x < m) {
        best = algorithm;
        m = x;
      }
    }
    return best;
  }
  Summary hand_stats(const std::string& algorithm) const { return summary_of(hand.at(algorithm)); }
  // The algorithm over MPI in each process, then their median and range.
  Summary ratio(const std::string& algorithm) const {
    std::vector<double> r;
    const auto& rounds = hand.at(algorithm);
    for (const auto& [round, n] : native)
      if (rounds.count(round) && n > 0) r.push_back(rounds.at(round) / n);
    return summarize(r);
  }
  static Summary summary_of(const std::map<int, double>& m) {
    std::vector<double> v;
    for (const auto& [round, x] : m) v.push_back(x);
    return summarize(v);
  }
};

struct SweepSize {
  std::map<std::string, VariantAtSize> variants;  // by variant name
  std::string best;                               // the variant whose MPI median is lowest
};

bool is_variant_sweep(const std::vector<AllreduceRow>& rows) {
  std::set<std::string> variants;
  for (const auto& r : rows)
    if (r.header.ok() && r.config.algorithm == "native" && r.config.mpi_algorithm)
      variants.insert(variant_name(r.config));
  return variants.size() > 1;
}

std::map<std::int64_t, SweepSize> pool_sweep(const std::vector<AllreduceRow>& rows) {
  std::map<std::int64_t, SweepSize> sizes;
  for (const auto& r : rows) {
    if (!r.header.ok() || !r.config.mpi_algorithm) continue;
    VariantAtSize& v = sizes[r.config.bytes].variants[variant_name(r.config)];
    (r.config.algorithm == "native" ? v.native : v.hand[r.config.algorithm])[r.round.value_or(1)] = r.stats.median;
  }
  for (auto& [bytes, size] : sizes) {
    double best = 0;
    for (const auto& [name, v] : size.variants) {
      if (v.native.empty()) continue;
      const double m = v.native_stats().median;
      if (size.best.empty() || m < best) {
        size.best = name;
        best = m;
      }
    }
  }
  return sizes;
}

constexpr const char* kAsLaunched = "mpi decision, malloc default";

// The best hand-written algorithm against the strongest MPI variant of each size, in that variant's
// processes (the same malloc, the same process), and against Open MPI as launched (its decision,
// glibc's malloc).
std::vector<std::vector<std::string>> sweep_table(const std::map<std::int64_t, SweepSize>& sizes, double factor) {
  std::vector<std::vector<std::string>> table;
  for (const auto& [bytes, size] : sizes) {
    if (size.best.empty()) continue;
    const VariantAtSize& best = size.variants.at(size.best);
    const std::string hand = best.best_hand();
    if (hand.empty()) continue;
    const Summary r = best.hand_stats(hand), n = best.native_stats(), ratio = best.ratio(hand);
    const double b = static_cast<double>(bytes);
    const auto busbw = [&](double seconds) { return fmt::format("{:.2f}", b / seconds * 1e-9 * factor); };
    std::string launched = "-";
    if (size.variants.count(kAsLaunched) && !size.variants.at(kAsLaunched).native.empty() &&
        size.variants.at(kAsLaunched).hand.count(hand)) {
      const VariantAtSize& d = size.variants.at(kAsLaunched);
      const Summary dr = d.ratio(hand);
      launched = fmt::format("{} ({:.2f}, {:.2f}-{:.2f})", busbw(d.native_stats().median), dr.median, dr.min, dr.max);
    }
    table.push_back({human_bytes(bytes), hand, busbw(r.median), "`" + size.best + "`", busbw(n.median),
                     fmt::format("{:.2f} ({:.2f}-{:.2f})", ratio.median, ratio.min, ratio.max),
                     separable(r, n) ? (r.median < n.median ? "yes, trainlab faster" : "yes, MPI faster") : "no",
                     launched});
  }
  return table;
}

// Issue 27's targets on a sweep: trainlab's best at or below 1.0x the strongest MPI variant at every
// size (the ratio's median over the rounds), and its busbw from 16M up at or above 0.5x the
// single-core memcpy of the same run; the sizes that miss, named.
std::string sweep_verdict(const std::map<std::int64_t, SweepSize>& sizes, double factor, double memcpy_gbps) {
  std::string over, under;
  bool any_large = false;
  for (const auto& [bytes, size] : sizes) {
    if (size.best.empty()) continue;
    const VariantAtSize& best = size.variants.at(size.best);
    const std::string hand = best.best_hand();
    if (hand.empty()) continue;
    const double ratio = best.ratio(hand).median;
    if (ratio > 1.0) over += fmt::format("{}{} {:.2f}", over.empty() ? "" : ", ", human_bytes(bytes), ratio);
    if (bytes >= (16 << 20) && memcpy_gbps > 0) {
      any_large = true;
      const double f = static_cast<double>(bytes) / best.hand_stats(hand).median * 1e-9 * factor / memcpy_gbps;
      if (f < 0.5) under += fmt::format("{}{} {:.2f}x", under.empty() ? "" : ", ", human_bytes(bytes), f);
    }
  }
  std::string text =
      fmt::format("Targets (issue 27): trainlab's best at or below 1.0x the strongest MPI variant at every size: {}",
                  over.empty() ? "met" : "MISSED (" + over + ")");
  if (any_large)
    text += fmt::format("; its busbw from 16M at or above 0.5x memcpy ({:.2f} GB/s): {}", memcpy_gbps,
                        under.empty() ? "met" : "MISSED (" + under + ")");
  return text + ".\n";
}

// Every variant's median time at every size, microseconds (the strongest of each size in bold),
// and the ring's over the processes of each malloc.
std::string variants_table(const std::map<std::int64_t, SweepSize>& sizes) {
  std::set<std::string> names;
  for (const auto& [bytes, size] : sizes)
    for (const auto& [name, v] : size.variants) names.insert(name);
  std::vector<std::string> head = {"variant"};
  for (const auto& [bytes, size] : sizes) head.push_back(human_bytes(bytes));
  std::vector<std::vector<std::string>> table;
  for (const std::string& name : names) {
    std::vector<std::string> line = {"`" + name + "`"};
    for (const auto& [bytes, size] : sizes) {
      const auto it = size.variants.find(name);
      if (it == size.variants.end() || it->second.native.empty()) {
        line.push_back("-");
        continue;
      }
      const std::string cell = fmt::format("{:.1f}", it->second.native_stats().median * 1e6);
      line.push_back(name == size.best ? "**" + cell + "**" : cell);
    }
    table.push_back(line);
  }
  std::set<std::string> hands;
  for (const auto& [bytes, size] : sizes)
    for (const auto& [name, v] : size.variants)
      for (const auto& [algorithm, rounds] : v.hand) hands.insert(algorithm);
  for (const std::string& algorithm : hands) {
    for (const std::string malloc : {"default", "tuned"}) {
      std::vector<std::string> line = {algorithm + " (trainlab), in the processes with malloc " + malloc};
      bool any = false;
      for (const auto& [bytes, size] : sizes) {
        std::vector<double> medians;
        for (const auto& [name, v] : size.variants) {
          const bool same_malloc =
              name.size() >= malloc.size() && name.compare(name.size() - malloc.size(), malloc.size(), malloc) == 0;
          if (!same_malloc || !v.hand.count(algorithm)) continue;
          for (const auto& [round, m] : v.hand.at(algorithm)) medians.push_back(m);
        }
        any = any || !medians.empty();
        line.push_back(medians.empty() ? "-" : fmt::format("{:.1f}", summarize(medians).median * 1e6));
      }
      if (any) table.push_back(line);
    }
  }
  return render_table(head, table, true);
}

std::optional<ReportSection> sweep_section(const std::string& run_id, const std::vector<AllreduceRow>& rows) {
  const auto sizes = pool_sweep(rows);
  const AllreduceRow* first = nullptr;
  int ranks = 0, rounds = 0, failed = 0;
  double memcpy_gbps = 0;
  std::set<std::string> variants;
  for (const auto& r : rows) {
    if (!r.header.ok()) {
      ++failed;
      continue;
    }
    if (first == nullptr) first = &r;
    ranks = r.config.ranks;
    rounds = std::max(rounds, r.round.value_or(1));
    memcpy_gbps = r.memcpy_gbps.value_or(memcpy_gbps);
    if (r.config.algorithm == "native") variants.insert(variant_name(r.config));
  }
  if (first == nullptr) return std::nullopt;
  const double factor = ranks > 0 ? busbw_factor(Collective::allreduce, ranks) : 1.0;
  const auto table = sweep_table(sizes, factor);
  const std::vector<std::string> head = {"size",           "best hand-written",
                                         "its busbw GB/s", "strongest MPI variant",
                                         "its busbw GB/s", "time ratio trainlab / MPI (min-max)",
                                         "separable",      "Open MPI as launched: busbw (time ratio, min-max)"};
  ReportSection section =
      section_of("allreduce", run_id, first->header.env,
                 fmt::format(", {} ranks, {} MPI variants x {} rounds", ranks, variants.size(), rounds));
  const std::string figure = figure_path("allreduce", run_id);
  std::ostringstream md;
  md << fmt::format(
      "\n## All-reduce: trainlab's against the strongest MPI, {} ranks{}\n\nRun `{}` (`bench/allreduce_variants.py`) "
      "on {}, {} ranks{}: {} MPI variants (Open MPI's all-reduce algorithms and its own decision among them, each "
      "under "
      "glibc's malloc and under a tuned one), a process each per round, {} round(s) interleaved; every process times "
      "the hand-written all-reduces beside MPI's. A figure at a size is the median of the processes' medians; the "
      "peer of a size is the MPI variant with the lowest, named, and trainlab's is its best hand-written algorithm "
      "in that variant's own processes (the same malloc, the same process), with the time ratio's median and range "
      "over the rounds. Choosing the lowest of many noisy medians favours the peer: a ratio above 1 that is not "
      "separable "
      "is within the noise. Times are the slowest rank's; busbw = bytes / time x 2(P-1)/P.{}\n\n",
      ranks, first->config.mpi_transport ? ", over " + *first->config.mpi_transport : "", run_id,
      measured_on(first->header.env), ranks,
      first->config.mpi_transport ? " (Open MPI's transport forced: btl " + *first->config.mpi_transport + ")" : "",
      variants.size(), rounds,
      failed > 0 ? fmt::format(" {} row(s) of failed variant processes are in the ledger.", failed) : "");
  md << render_table(head, table, true);
  const std::string verdict = sweep_verdict(sizes, factor, memcpy_gbps);
  md << "\n" << verdict;
  md << "\nEvery variant's median time per size, microseconds (the strongest in bold):\n\n" << variants_table(sizes);
  md << "\n![all-reduce busbw against size](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true) + "\n" + verdict;
  // The figure: the ring, the strongest variant of each size, Open MPI as launched, memcpy.
  chart::LineChart lines;
  lines.x_label = "message size";
  lines.y_label = "busbw GB/s";
  lines.log_x = true;
  lines.x_tick = bytes_tick;
  chart::Series ring{
      "the best hand-written all-reduce (trainlab), in the strongest variant's processes", chart::kBlue, {}, false};
  chart::Series strongest{"the strongest MPI variant of each size", chart::kRed, {}, false};
  chart::Series launched{"Open MPI as launched (its decision, glibc malloc)", chart::kGrey, {}, false};
  chart::Series copy{fmt::format("single-core memcpy ({:.2f} GB/s)", memcpy_gbps), chart::kReference, {}, true};
  for (const auto& [bytes, size] : sizes) {
    if (size.best.empty()) continue;
    const double b = static_cast<double>(bytes);
    const auto point = [&](const Summary& t) {
      return chart::Point{b, b / t.median * 1e-9 * factor, b / t.max * 1e-9 * factor, b / t.min * 1e-9 * factor};
    };
    const VariantAtSize& best = size.variants.at(size.best);
    if (!best.best_hand().empty()) ring.points.push_back(point(best.hand_stats(best.best_hand())));
    strongest.points.push_back(point(best.native_stats()));
    if (size.variants.count(kAsLaunched) && !size.variants.at(kAsLaunched).native.empty())
      launched.points.push_back(point(size.variants.at(kAsLaunched).native_stats()));
    if (memcpy_gbps > 0) copy.points.push_back({b, memcpy_gbps, {}, {}});
  }
  lines.series = {ring, strongest, launched};
  if (!copy.points.empty()) lines.series.push_back(copy);
  section.figures.emplace_back(
      figure, chart::render({"all-reduce bus bandwidth against the strongest MPI (run " + run_id + ")", {lines}, {}}));
  return section;
}

// The latest variant sweep at each world size, the smallest world first: its section, with the
// others' appended (each its own block, "allreduce-np<P>").
std::optional<ReportSection> sweeps_section(const std::vector<AllreduceRow>& all) {
  std::map<std::string, std::vector<AllreduceRow>> by_run;
  std::vector<std::string> order;
  for (const auto& row : all) {
    if (row.from_bench_buckets()) continue;
    if (!by_run.count(row.header.run_id)) order.push_back(row.header.run_id);
    by_run[row.header.run_id].push_back(row);
  }
  // (ranks, forced transport) -> run: a sweep over TCP does not stand in for one over shared memory.
  std::map<std::pair<int, std::string>, std::string> latest;
  for (const std::string& run : order) {
    const auto& rows = by_run.at(run);
    if (is_variant_sweep(rows))
      latest[{rows.front().config.ranks, rows.front().config.mpi_transport.value_or("")}] = run;
  }
  // Each sweep its own block: "allreduce" for 2 ranks over the default transport (the README's),
  // else "allreduce-np<P>", and "-tcp" when the transport was forced to "tcp,self".
  const auto block = [](int ranks, const std::string& transport) {
    const std::string suffix = transport.empty() ? "" : "-" + transport.substr(0, transport.find(','));
    return ranks == 2 && transport.empty() ? std::string("allreduce") : "allreduce-np" + std::to_string(ranks) + suffix;
  };
  std::optional<ReportSection> section;
  for (const auto& [key, run] : latest) {
    std::optional<ReportSection> part = sweep_section(run, by_run.at(run));
    if (!part) continue;
    const std::string name = block(key.first, key.second);
    if (!section) {
      section = std::move(part);
      section->marker = name;
      continue;
    }
    section->markdown += part->markdown;
    std::vector<std::string> names;
    for (auto& figure : part->figures) {
      names.push_back(figure.first);
      section->figures.push_back(std::move(figure));
    }
    section->more_blocks.push_back({name, part->readme_intro, part->readme_table, std::move(names)});
  }
  return section;
}

std::optional<ReportSection> allreduce_section(const SectionInput& in) {
  std::vector<AllreduceRow> all = in.read<AllreduceRow>();
  // The other collectives have their own section (collectives_section.cpp), and so has the two-level
  // run (hierarchical_section.cpp).
  all.erase(std::remove_if(all.begin(), all.end(),
                           [](const AllreduceRow& r) {
                             return !r.config.is_allreduce() || r.config.two_level() || r.config.study.has_value();
                           }),
            all.end());
  const auto [run_id, rows] = latest_run(all, [](const AllreduceRow& row) { return !row.from_bench_buckets(); });
  if (run_id.empty()) return std::nullopt;
  if (is_variant_sweep(rows)) return sweeps_section(all);
  // Per algorithm, per size.
  std::map<std::string, BySize> by;
  double memcpy_gbps = 0;
  int ranks = 0;
  for (const auto& row : rows) {
    if (!row.header.ok()) continue;
    by[row.config.algorithm][row.config.bytes] = &row;
    memcpy_gbps = row.memcpy_gbps.value_or(memcpy_gbps);
    ranks = row.config.ranks;
  }
  if (by.empty()) return std::nullopt;
  const double factor = ranks > 0 ? busbw_factor(Collective::allreduce, ranks) : 1.0;
  const auto table = ring_against_native(by);
  const AllreduceRow& first = rows.front();
  ReportSection section = section_of("allreduce", run_id, first.header.env, fmt::format(", {} ranks", ranks));
  const std::string figure = figure_path("allreduce", run_id);
  const std::vector<std::string> head = {"size",       "ring busbw GB/s",     "native busbw GB/s",
                                         "time ratio", "ring against native", "separable"};
  std::ostringstream md;
  md << fmt::format(
      "\n## All-reduce: bus bandwidth against size\n\nRun `{}` of `bench_allreduce` on {}, {} ranks, {}: every size "
      "the ring and the library's own all-reduce alternating, each time the slowest rank's; busbw = bytes / time x "
      "2(P-1)/P (nccl-tests' definition); the dashed line is one core's memcpy. Whiskers: busbw at the slowest and "
      "fastest iteration. The noise floor is the native all-reduce's even iterations against its odd ones.\n\n",
      run_id, measured_on(first.header.env), ranks, first.config.communicator.value_or("?"));
  md << render_table(head, table, true);
  md << "\n![all-reduce busbw against size](" << figure << ")\n";
  section.markdown = md.str();
  // The README quotes every fourth size and the largest.
  std::vector<std::vector<std::string>> some;
  for (std::size_t i = 0; i < table.size(); ++i)
    if (i % 4 == 0 || i + 1 == table.size()) some.push_back(table[i]);
  section.readme_table = render_table(head, some, true);
  chart::LineChart lines;
  lines.x_label = "message size";
  lines.y_label = "busbw GB/s";
  lines.series = busbw_series(by, factor, memcpy_gbps);
  lines.log_x = true;
  lines.x_tick = bytes_tick;
  section.figures.emplace_back(figure, chart::render({"all-reduce bus bandwidth (run " + run_id + ")", {lines}, {}}));
  return section;
}

}  // namespace

SectionDef allreduce_report_section() { return {"all-reduce", allreduce_section}; }

}  // namespace trainlab::bench
