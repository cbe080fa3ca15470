// The comparison with PyTorch (bench/compare_torch.py's rows): each trainlab configuration's ratio to the best PyTorch
// variant of its dtype, per round.
#include <fmt/format.h>
#include <algorithm>

#include <optional>
#include <sstream>

#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/table.h"
#include "studies/compare_torch/compare_torch.h"

namespace trainlab::bench {

namespace {

// A failed variant's error inside a Markdown table cell: the peer's own message where the text
// carries its JSON line ("error": "..."), '|' escaped, line breaks as spaces.
std::string markdown_cell(std::string text) {
  static const std::string kKey = "\"error\": \"";
  if (const auto at = text.rfind(kKey); at != std::string::npos) {
    const auto end = text.find('"', at + kKey.size());
    text = text.substr(at + kKey.size(), end == std::string::npos ? std::string::npos : end - at - kKey.size());
  }
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

// How a model's comparison is named: SmallCNN's (`make compare`) keeps the names its blocks had.
struct ModelNames {
  std::string model;   // the rows' run.model
  std::string title;   // "SmallCNN", "ResNet-20"
  std::string peer;    // its PyTorch twin's script
  std::string suffix;  // appended to the section's and blocks' names: "" or "_resnet"
  std::string anchor;  // docs/RESULTS.md's heading for it
};
const ModelNames kModels[] = {{"smallcnn", "SmallCNN", "torch_smallcnn.py", "", "against-pytorch"},
                              {"resnet", "ResNet-20", "torch_resnet.py", "_resnet", "resnet-20-against-pytorch"}};

std::string range(const MedianRange& s, const char* format) {
  return fmt::format(fmt::runtime(std::string(format) + " (" + format + "-" + format + ")"), s.median, s.min, s.max);
}

// 4825.3 -> "4,825" (digits 0), 1.283 -> "1.28" (digits 2): compare_torch.py's numbers.
std::string grouped(double v, int digits) {
  // Built by appending (GCC 12's -Wrestrict misreads std::string::insert here at -O3).
  const std::string text = fmt::format("{:.{}f}", v, digits);
  const std::size_t first = text[0] == '-' ? 1 : 0;
  const std::size_t end = std::min(text.find('.'), text.size());  // the integer digits' end
  std::string out = text.substr(0, first);
  for (std::size_t i = first; i < end; ++i) {
    out += text[i];
    if (i + 1 < end && (end - i - 1) % 3 == 0) out += ',';
  }
  return out + text.substr(end);
}
std::string spread(const MedianRange& s, int digits = 0) {
  return grouped(s.median, digits) + " (" + grouped(s.min, digits) + "-" + grouped(s.max, digits) + ")";
}

// The run's whole comparison (every configuration with its GFLOP/s and RSS, every PyTorch variant,
// the targets) and the headline of three: the blocks docs/RESULTS.md quotes, from a run recorded
// with its compare_torch_run row.
std::vector<ReportBlock> comparison_blocks(const SectionInput& in, const std::string& run_id,
                                           const std::vector<CompareTorchRow>& configs, const std::string& suffix,
                                           const ModelNames& names) {
  std::optional<CompareTorchRunRow> run;
  for (auto& r : in.read<CompareTorchRunRow>())
    if (r.header.run_id == run_id) run = std::move(r);
  if (!run) return {};  // recorded before the run row existed: its blocks stay as they were written
  std::ostringstream t;
  const auto gemm = [&](const char* dtype) {
    const auto it = run->gemm_gflop_per_s.find(dtype);
    return it == run->gemm_gflop_per_s.end() ? std::string("?") : spread(it->second);
  };
  t << "GEMM ceiling (oneDNN, 2048^3): f32 " << gemm("f32") << " GFLOP/s, bf16 " << gemm("bf16") << " GFLOP/s.\n\n";
  t << "| trainlab config | samples/s | best PyTorch (variant) | samples/s | ratio | GFLOP/s (of ceiling) | peak RSS "
       "MB "
       "(PyTorch) |\n|---|---|---|---|---|---|---|\n";
  for (const auto& row : configs) {
    const std::string ratio = row.ratio ? spread(*row.ratio, 2) + "x" : std::string("?");
    const std::string gflops =
        row.gflop_per_s && row.ceiling_share
            ? fmt::format("{:.0f} ({:.0f}%)", row.gflop_per_s->median, 100 * row.ceiling_share->median)
            : std::string("?");
    const std::string rss = row.rss_mb && row.peer_rss_mb
                                ? fmt::format("{:.0f} ({:.0f})", row.rss_mb->median, row.peer_rss_mb->median)
                                : std::string("?");
    t << "| " << row.config_name << " | " << spread(row.samples_per_s) << " | " << row.peer << " | "
      << spread(row.peer_samples_per_s) << " | " << ratio << " | " << gflops << " | " << rss << " |\n";
  }
  std::vector<CompareTorchPeerRow> variants;
  for (auto& v : in.read<CompareTorchPeerRow>())
    if (v.header.run_id == run_id) variants.push_back(std::move(v));
  if (!variants.empty()) {
    t << "\nEvery PyTorch variant measured in this run (the best per dtype, marked, is the peer above; "
         "`bench/peers/"
      << names.peer
      << " --help` says what each is):\n\n| kind | PyTorch variant | samples/s | |\n"
         "|---|---|---|---|\n";
    for (const auto& v : variants) {
      if (v.repeats.empty()) {  // failed every round: said, with why
        t << "| " << v.peer_kind << " | " << v.config_name
          << " | failed: " << markdown_cell(v.error.value_or("no round ran")) << " |  |\n";
        continue;
      }
      const Summary s = summarize(v.repeats);
      t << "| " << v.peer_kind << " | " << v.config_name << " | " << spread(MedianRange{s.median, s.min, s.max, s.n})
        << " | " << (v.best ? "best" : "") << " |\n";
    }
  }
  t << "\n| target | measured (median, min-max) | verdict |\n|---|---|---|\n";
  for (const auto& target : run->targets)
    t << "| " << target.target << " | " << spread(target.value, 2) << " | " << target.verdict << " |\n";
  std::ostringstream h;
  h << "| trainlab | samples/s | best PyTorch variant | samples/s | ratio |\n|---|---|---|---|---|\n";
  for (const char* name : {"onednn f32 nhwc fused", "onednn bf16 nhwc fused", "onednn f32 nhwc fused, forward only",
                           "onednn bf16 nhwc fused, forward only"}) {
    for (const auto& row : configs) {
      if (row.config_name != name || !row.ratio) continue;
      h << "| " << name << " | " << spread(row.samples_per_s) << " | " << row.peer << " | "
        << spread(row.peer_samples_per_s) << " | " << spread(*row.ratio, 2) << "x |\n";
    }
  }
  const Environment& env = configs.front().header.env;
  const std::string when = fmt::format("from run `{}` (`{}`, {}, {} interleaved rounds) on {}", run_id,
                                       configs.front().run.command, run->date, run->rounds, measured_on(env));
  return {{"compare_torch" + names.suffix + suffix, when, t.str(), {}},
          {"compare_torch_headline" + names.suffix + suffix,
           when + fmt::format(": {} training, batch {}, median (min-max) of the rounds; every configuration: "
                              "[the table](#{})",
                              names.title, configs.front().run.batch, names.anchor),
           h.str(),
           {}}};
}

// The text of `text` between `open` and the next `close` after it ("" when either is missing).
std::string between(const std::string& text, const std::string& open, const std::string& close) {
  const auto a = text.find(open);
  if (a == std::string::npos) return "";
  const auto b = text.find(close, a + open.size());
  return b == std::string::npos ? "" : text.substr(a + open.size(), b - a - open.size());
}

// The README's headline rows of a run: each of its training and forward-only targets ("avx512
// (avx512_core_bf16): f32 training, best trainlab (onednn f32 nhwc fused) >= 1.5x best PyTorch f32"),
// with both sides' samples/s, the peer named and the verdict compare_torch.py gave it.
std::vector<HeadlineRow> headline_rows(const SectionInput& in, const std::string& run_id,
                                       const std::vector<CompareTorchRow>& configs, const ModelNames& names) {
  std::vector<HeadlineRow> out;
  for (const auto& run : in.read<CompareTorchRunRow>()) {
    if (run.header.run_id != run_id) continue;
    for (const auto& target : run.targets) {
      const std::string& name = target.target;
      const std::string what = between(name, ": ", ", best trainlab");
      const std::string config = between(name, "best trainlab (", ")");
      const std::string bar = between(name, config + ") ", " best PyTorch");
      const auto row = std::find_if(configs.begin(), configs.end(),
                                    [&](const CompareTorchRow& c) { return c.config_name == config; });
      if (what.empty() || row == configs.end()) continue;  // the ceiling, thread, RSS and report-only rows
      const std::string isa = between(name, "(", ")");
      out.push_back({fmt::format("{} {}{}: trainlab's best against the strongest PyTorch variant", names.title, what,
                                 isa.empty() ? "" : " (" + isa + ")"),
                     fmt::format("{}x: {} ({}) against {} samples/s ({}); target {}: {}", spread(target.value, 2),
                                 spread(row->samples_per_s), config, spread(row->peer_samples_per_s), row->peer,
                                 bar.empty() || bar[0] == '(' ? "none" : bar, target.verdict),
                     run_id});
    }
  }
  return out;
}

// A bar per configuration: the median of its per-round ratios, whisker their min-max; parity dashed.
std::string ratios_figure(const std::vector<CompareTorchRow>& configs, const std::string& run_id) {
  chart::BarChart bars;
  bars.label_width = 380;
  bars.width = 420;
  bars.bar_height = 18;
  bars.gap = 8;
  bars.reference = 1.0;
  for (const CompareTorchRow& row : configs) {
    const Summary r = summarize(*row.ratio_per_round);
    chart::BarRow bar;
    bar.label = row.config_name;
    bar.value = r.median;
    bar.lo = r.min;
    bar.hi = r.max;
    bar.colour = r.median >= 1 ? chart::kBlue : chart::kRed;
    bar.value_text = fmt::format("{:.2f}x", r.median);
    bars.rows.push_back(bar);
  }
  return chart::render({"trainlab against the best PyTorch variant per dtype (run " + run_id + ")",
                        {bars},
                        {"ratio, samples/s (bar: median of the per-round ratios; whisker: their min-max; dashed: "
                         "parity)"}});
}

// One model's latest comparison: SmallCNN's (`make compare`), or another's (compare_torch.py --model).
std::optional<ReportSection> compare_torch_section(const SectionInput& in, const ModelNames& names) {
  std::vector<CompareTorchRow> of_model;
  for (auto& row : in.read<CompareTorchRow>())
    if (row.run.model == names.model) of_model.push_back(std::move(row));
  const auto [run_id, rows] = latest_run(of_model);
  if (run_id.empty()) return std::nullopt;
  std::vector<CompareTorchRow> configs;
  for (const auto& row : rows)
    if (row.ratio_per_round) configs.push_back(row);
  if (configs.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> table;
  for (const CompareTorchRow& row : configs) {
    const Summary r = summarize(*row.ratio_per_round);
    table.push_back({row.config_name, row.peer, range(row.samples_per_s, "{:.0f}"),
                     range(row.peer_samples_per_s, "{:.0f}"),
                     fmt::format("{:.2f}x ({:.2f}-{:.2f})", r.median, r.min, r.max)});
  }
  const CompareTorchRow& first = configs.front();
  const auto torch = first.header.env.versions.find("torch");
  // A run as an AVX2 machine runs it (make compare CPU=avx2, its own ledger) fills blocks of its own.
  const std::string suffix = first.isa.rfind("avx2", 0) == 0 ? "_avx2" : "";
  ReportSection section = section_of("torch_ratios" + names.suffix + suffix, run_id, first.header.env);
  const std::string figure = figure_path("compare_torch", run_id);
  std::ostringstream md;
  md << fmt::format(
      "\n## {}gainst PyTorch\n\nRun `{}` (`{}`) on {}, PyTorch {}, batch {}: every configuration its own process, "
      "all of them in turn each round; each trainlab configuration against the best PyTorch variant of its dtype "
      "in this run (by median), the ratio per round.\n\n",
      names.suffix.empty() ? "A" : names.title + " a", run_id, first.run.command, measured_on(first.header.env),
      torch == first.header.env.versions.end() ? "?" : torch->second, first.run.batch);
  md << render_table({"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"},
                     table, true);
  md << "\n![trainlab against the best PyTorch variant](" << figure << ")\n";
  section.markdown = md.str();
  section.readme_table = render_table(
      {"trainlab", "best PyTorch variant", "samples/s", "PyTorch samples/s", "ratio (per-round range)"}, table, true);
  section.figures.emplace_back(figure, ratios_figure(configs, run_id));
  section.more_blocks = comparison_blocks(in, run_id, configs, suffix, names);
  section.headline = headline_rows(in, run_id, configs, names);
  return section;
}

}  // namespace

SectionDef compare_torch_report_section() {
  return {"compare_torch", [](const SectionInput& in) { return compare_torch_section(in, kModels[0]); }};
}

SectionDef compare_torch_resnet_report_section() {
  return {"compare_torch_resnet", [](const SectionInput& in) { return compare_torch_section(in, kModels[1]); }};
}

}  // namespace trainlab::bench
