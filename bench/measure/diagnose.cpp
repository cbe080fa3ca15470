// trainlab diagnose: seed 002's ordered checks (liveness -> shape -> distribution -> change history)
// over what a run left behind. Each check reads only artifacts: the run's ledger rows
// (train_progress, train_run; bench/measure/run_record.h), its Chrome trace, its data set's manifest, its
// checkpoint, and an earlier run's rows for the comparisons.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/measure/diagnosis.h"
#include "bench/measure/ledger.h"
#include "bench/measure/loader_bench.h"
#include "bench/measure/run_record.h"
#include "engine/data/disk_dataset.h"
#include "engine/io/fileio.h"

namespace trainlab::bench {

const char* check_verdict_name(CheckVerdict verdict) {
  switch (verdict) {
    case CheckVerdict::ok:
      return "ok";
    case CheckVerdict::problem:
      return "PROBLEM";
    case CheckVerdict::not_applicable:
      return "n/a";
  }
  return "?";
}

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Thresholds, stated once: a step is starved when it waits for data more than a quarter of its
// time; a run is starved when its data wait is over 10% of its step time; a rank straggles when
// its work takes 15% longer than the ranks' median.
constexpr double kStarvedStep = 0.25;
constexpr double kStarvedRun = 0.10;
constexpr double kStragglerExcess = 15.0;

// What the checks read, whatever the target was.
struct Artifacts {
  std::vector<TrainProgressRow> progress;  // train_progress rows, in order
  std::optional<TrainRunRow> final;        // the train_run row
  KnobMap config;
  std::vector<double> step_s, data_wait_s;  // per measured step (ledger or trace)
  std::optional<PhaseTotals> phases;        // totals
  std::vector<RankStepStats> ranks;
  std::string trace, checkpoint, data;
  std::string host;
  std::int64_t pid = 0;
  int cores = 0;
  std::vector<TrainRunRow> runs;             // every run's summary row (for --against)
  std::vector<LoaderRepeatRow> loader_rows;  // loader-bench measurements
  std::vector<std::string> warnings;         // rows of the ledger skipped (damaged), with their line
};

std::string config_value(const KnobMap& config, const char* key) {
  const auto it = config.find(key);
  return it == config.end() ? std::string() : it->second;
}

std::string hostname_now() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof buffer - 1);
  return buffer;
}

// The steps of a Chrome trace written by trainlab (its "step" and "data_wait" spans) and the phase
// totals.
void read_trace(const std::string& path, Artifacts& a) {
  const auto bytes = read_file(path, 1ull << 31);
  check_json_bounds(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 64, 1ull << 31, path);
  json trace;
  try {
    trace = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw Error("trace " + path + " is not JSON: " + e.what());
  }
  TL_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
           "trace " + path + " is not a Chrome trace (no traceEvents)");
  struct Span {
    double ts, dur;
  };
  std::vector<Span> steps, waits;
  std::map<std::string, double> totals;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || e["ph"] != "X") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) continue;
    if (!e.contains("name") || !e["name"].is_string()) continue;
    const std::string name = e["name"];
    const Span s{e["ts"].get<double>(), e["dur"].get<double>()};
    if (name == "step") steps.push_back(s);
    if (name == "data_wait") waits.push_back(s);
    if (name == "data_wait" || name == "forward" || name == "backward" || name == "optimizer")
      totals[name] += s.dur * 1e-6;
  }
  // Each step's waits are the data_wait spans that start inside it: both sorted by start, found by
  // binary search (a scan of every wait per step took 16 s for 100k steps).
  const auto by_start = [](const Span& x, const Span& y) { return x.ts < y.ts; };
  std::sort(steps.begin(), steps.end(), by_start);
  std::sort(waits.begin(), waits.end(), by_start);
  for (const auto& s : steps) {
    double wait = 0;
    for (auto w = std::lower_bound(waits.begin(), waits.end(), Span{s.ts, 0}, by_start);
         w != waits.end() && w->ts < s.ts + s.dur; ++w)
      wait += w->dur;
    a.step_s.push_back(s.dur * 1e-6);
    a.data_wait_s.push_back(wait * 1e-6);
  }
  a.phases = PhaseTotals{totals["data_wait"], totals["forward"], totals["backward"], totals["optimizer"], 0.0};
}

// A file the run recorded (its trace, checkpoint, data set), when it is this run's to read here:
// recorded absolute (a relative one, from a record older than that rule, would be resolved against
// this process's directory: another run's files) and on this host. Otherwise "", with a warning.
std::string recorded_path(Artifacts& a, const char* key) {
  const std::string path = config_value(a.config, key);
  if (path.empty()) return path;
  if (!fs::path(path).is_absolute()) {
    a.warnings.push_back(
        fmt::format("the run recorded {} as the relative path {} (an older record; its working "
                    "directory is unknown): not read",
                    key, quote_value(path)));
    return "";
  }
  if (!a.host.empty() && a.host != hostname_now()) {
    a.warnings.push_back(
        fmt::format("the run's {} {} is on host {}, not this one: not read", key, quote_value(path), a.host));
    return "";
  }
  return path;
}

bool is_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "COMPLETE", ec);
}

Artifacts gather(const DiagnoseOptions& o, std::string& kind) {
  Artifacts a;
  std::error_code ec;
  const std::string ledger_path = o.ledger.empty() ? default_ledger_path("cpu") : o.ledger;
  if (is_checkpoint_dir(o.target)) {
    kind = "checkpoint";
    a.checkpoint = o.target;
  } else if (fs::is_regular_file(o.target, ec) && o.target.size() > 5 &&
             o.target.compare(o.target.size() - 5, 5, ".json") == 0) {
    kind = "trace";
    a.trace = o.target;
  } else {
    kind = "run";
    // A row of the wrong shape is skipped, with its line, never read into a check.
    const Ledger::Loaded loaded = Ledger(ledger_path).load();
    a.warnings = loaded.warnings;
    a.runs = loaded.read<TrainRunRow>(&a.warnings);
    a.loader_rows = loaded.read<LoaderRepeatRow>(&a.warnings);
    for (auto& row : loaded.read<TrainProgressRow>(&a.warnings))
      if (row.header.run_id == o.target) a.progress.push_back(std::move(row));
    for (const auto& row : a.runs)
      if (row.header.run_id == o.target) a.final = row;
    TL_CHECK(!a.progress.empty() || a.final, "diagnose: " + quote_value(o.target) +
                                                 " is not a checkpoint directory, a trace (.json) or a trainlab train "
                                                 "run in " +
                                                 ledger_path + " (train with --ledger to record one)");
    const RowHeader& first = a.final ? a.final->header : a.progress.front().header;
    a.host = first.env.host;
    a.pid = a.final ? a.final->process.pid : a.progress.front().process.pid;
    a.cores = first.env.cores;
    if (a.final) a.config = a.final->config;
    for (const auto& p : a.progress)
      if (p.config) a.config = *p.config;
    if (a.final) {
      a.step_s = a.final->step_seconds;
      a.data_wait_s = a.final->data_wait_seconds;
      a.phases = a.final->phases;
      a.ranks = a.final->ranks;
    }
    a.trace = recorded_path(a, "trace");
    a.checkpoint = recorded_path(a, "save");
    a.data = recorded_path(a, "data");
    if (!a.trace.empty() && !fs::is_regular_file(a.trace, ec)) a.trace.clear();
  }
  if (!a.trace.empty() && a.step_s.empty()) read_trace(a.trace, a);
  if (kind == "checkpoint") {
    // The config the checkpoint was trained with names the data set and the loader's workers.
    try {
      for (const auto& [key, value] : inspect_checkpoint(a.checkpoint).config) a.config[key] = value;
      a.data = config_value(a.config, "data");
    } catch (const Error&) {
      // check 8 reports why it cannot be read
    }
  }
  return a;
}

std::optional<TrainRunRow> earlier_run(const Artifacts& a, const std::string& run_id) {
  std::optional<TrainRunRow> found;
  for (const auto& row : a.runs)
    if (row.header.run_id == run_id) found = row;
  return found;
}

// ---- the checks ------------------------------------------------------------------------------------

DiagnosisCheck check_liveness(const Artifacts& a, const DiagnoseOptions& o, const std::string& kind) {
  DiagnosisCheck c{1, "step counter advancing (hang vs slow)", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "a collective deadlock or a dead rank (a hang has a different fix from slowness: rule it out first)";
  if (kind != "run") {
    c.finding =
        kind == "trace" ? "a trace is written when a run ends: its steps completed" : "needs the run's ledger rows";
    if (kind == "trace") c.verdict = CheckVerdict::ok;
    return c;
  }
  if (a.final && a.final->header.status == "failed") {
    c.verdict = CheckVerdict::problem;
    c.finding = "the run ended with an error: " + (a.final->error.empty() ? std::string("?") : a.final->error);
    c.evidence = fmt::format("a failed train_run row after {} progress rows", a.progress.size());
    return c;
  }
  // Progress times and the usual interval between them.
  std::vector<double> times, intervals;
  for (const auto& p : a.progress) times.push_back(p.process.unix_time);
  for (std::size_t i = 1; i < times.size(); ++i) intervals.push_back(times[i] - times[i - 1]);
  const double interval = intervals.empty() ? 0 : percentile(intervals, 0.5);
  std::string steadiness;
  if (intervals.size() >= 2) {
    const double slowest = *std::max_element(intervals.begin(), intervals.end());
    steadiness = fmt::format("; progress every {:.2f} s (median), slowest interval {:.2f} s", interval, slowest);
  }
  if (a.final) {
    c.verdict = CheckVerdict::ok;
    c.finding = fmt::format("the run finished: steps {} to {}", a.final->first_step, a.final->last_step);
    c.evidence = fmt::format("{} progress rows and the summary row{}", a.progress.size(), steadiness);
    return c;
  }
  const double now = o.now > 0 ? o.now : unix_seconds();
  const TrainProgressRow& last = a.progress.back();
  const double silence = now - (last.process.unix_time > 0 ? last.process.unix_time : now);
  const std::int64_t step = last.step;
  const double usual = interval > 0 ? interval : 1.0;
  const bool same_host = a.host == hostname_now();
  const bool alive = !same_host || process_alive(static_cast<long>(a.pid));
  c.evidence = fmt::format(
      "last progress row at step {} of {}, {:.0f} s ago ({:.0f}x the usual interval){}; process {} "
      "on {}: {}",
      step, last.steps, silence, silence / usual, steadiness, a.pid, a.host,
      same_host ? (alive ? "running" : "gone") : "on another host (not checked)");
  if (silence > o.stall_factor * usual && silence > 5) {
    c.verdict = CheckVerdict::problem;
    c.finding = alive ? fmt::format(
                            "HUNG at step {}: the step counter stopped {:.0f} s ago and the process is still "
                            "there (a collective waiting on a peer, a deadlock): not a slow run",
                            step, silence)
                      : fmt::format(
                            "DIED at step {}: no progress for {:.0f} s, the process is gone and left no summary "
                            "row (killed, or a crash)",
                            step, silence);
    return c;
  }
  c.verdict = CheckVerdict::ok;
  c.finding = fmt::format("running: step {} reached {:.0f} s ago, within the usual interval", step, silence);
  return c;
}

DiagnosisCheck check_shape(const Artifacts& a) {
  DiagnosisCheck c{2, "utilisation shape (sawtooth vs flat)", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "a kernel or step problem (flat and low would point at the step itself)";
  if (a.step_s.empty() || a.data_wait_s.size() != a.step_s.size()) {
    c.finding = "needs per-step data waits (the run's summary row or its trace)";
    return c;
  }
  std::int64_t starved = 0;
  double wait = 0, total = 0;
  for (std::size_t i = 0; i < a.step_s.size(); ++i) {
    wait += a.data_wait_s[i];
    total += a.step_s[i];
    if (a.step_s[i] > 0 && a.data_wait_s[i] / a.step_s[i] > kStarvedStep) ++starved;
  }
  const double share = total > 0 ? wait / total : 0;
  const double starved_frac = static_cast<double>(starved) / static_cast<double>(a.step_s.size());
  c.evidence = fmt::format(
      "{} steps: compute busy {:.1f}% of step time; {} steps ({:.0f}%) waited over {:.0f}% of their "
      "time for data",
      a.step_s.size(), (1 - share) * 100, starved, starved_frac * 100, kStarvedStep * 100);
  if (share > kStarvedRun) {
    c.verdict = CheckVerdict::problem;
    c.finding =
        starved_frac < 0.9
            ? fmt::format(
                  "sawtooth: input starvation (compute runs, then waits {:.0f}% of the time for the next "
                  "batches)",
                  share * 100)
            : fmt::format("input starvation on every step (each waits for data, {:.0f}% of the time)", share * 100);
    return c;
  }
  c.verdict = CheckVerdict::ok;
  c.finding = fmt::format("flat: the step waits {:.1f}% of its time for data", share * 100);
  return c;
}

// Per measured step, in ms: the compute (forward, backward, optimiser) and the data wait of a run's
// summary row; nullopt without one.
std::optional<std::pair<double, double>> per_step_ms(const TrainRunRow& run) {
  if (!run.phases || run.measured_steps <= 0) return std::nullopt;
  const PhaseTotals& p = *run.phases;
  const auto steps = static_cast<double>(run.measured_steps);
  return std::pair{(p.forward_s + p.backward_s + p.optimizer_s) / steps * 1e3, p.data_wait_s / steps * 1e3};
}

DiagnosisCheck check_breakdown(const Artifacts& a, const std::optional<TrainRunRow>& earlier) {
  DiagnosisCheck c{3, "step-time breakdown", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "guesswork: which stage owns the step";
  if (!a.phases) {
    c.finding = "needs the run's phase totals (summary row or trace)";
    return c;
  }
  const double wait = a.phases->data_wait_s, fwd = a.phases->forward_s, bwd = a.phases->backward_s,
               opt = a.phases->optimizer_s, comm = a.phases->comm_s;
  const double total = wait + fwd + bwd + opt + comm;
  if (total <= 0) {
    c.finding = "no measured steps";
    return c;
  }
  c.evidence = fmt::format(
      "data wait {:.1f}%, forward {:.1f}%, backward {:.1f}%, optimiser {:.1f}%, exposed "
      "communication {:.1f}%",
      wait / total * 100, fwd / total * 100, bwd / total * 100, opt / total * 100, comm / total * 100);
  const std::pair<double, const char*> stages[] = {{wait, "waiting for data"},
                                                   {fwd + bwd + opt, "computing (forward, backward, optimiser)"},
                                                   {comm, "waiting for communication"}};
  const auto* top = std::max_element(std::begin(stages), std::end(stages),
                                     [](const auto& x, const auto& y) { return x.first < y.first; });
  const std::string largest = fmt::format("the largest share is {} ({:.0f}%)", top->second, top->first / total * 100);
  // Against an earlier run: the same work per step should cost the same compute.
  if (a.final && earlier) {
    const auto now = per_step_ms(*a.final), before = per_step_ms(*earlier);
    if (now && before && before->first > 0) {
      const double growth = (now->first / before->first - 1) * 100;
      c.evidence += fmt::format(
          "; per step: compute {:.1f} ms against {:.1f} ms in the earlier run ({:+.0f}%), data "
          "wait {:.2f} ms against {:.2f} ms",
          now->first, before->first, growth, now->second, before->second);
      const bool same_work = config_value(a.config, "batch") == config_value(earlier->config, "batch");
      if (same_work && growth > kStragglerExcess) {
        c.verdict = CheckVerdict::problem;
        c.finding = fmt::format(
            "the step's compute is {:.0f}% slower than the earlier run's at the same batch: something "
            "takes the cores from it (the loader's decoding on the same cores, other processes) or "
            "the backend changed",
            growth);
        return c;
      }
    }
  }
  if (wait / total > kStarvedRun) {
    c.verdict = CheckVerdict::problem;
    c.finding = fmt::format("waiting for data takes {:.0f}% of the step; {}", wait / total * 100, largest);
  } else if (comm / total > 0.25) {
    c.verdict = CheckVerdict::problem;
    c.finding = fmt::format("waiting for communication takes {:.0f}% of the step; {}", comm / total * 100, largest);
  } else {
    c.verdict = CheckVerdict::ok;
    c.finding = largest;
  }
  return c;
}

DiagnosisCheck check_ranks(const Artifacts& a) {
  DiagnosisCheck c{4, "per-rank step-time distribution", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "uniform slowness (a communication or global problem)";
  const std::vector<RankStepStats>& ranks = a.ranks;
  if (ranks.size() < 2) {
    c.finding = ranks.empty() ? "needs the run's per-rank step times (a DDP run's summary row)" : "one process";
    return c;
  }
  c.evidence = rank_stats_text(ranks);
  const Straggler s = slowest_rank(ranks);
  if (s.excess_percent > kStragglerExcess) {
    c.verdict = CheckVerdict::problem;
    c.finding = fmt::format(
        "a straggler: rank {} works {:.1f} ms per step against the ranks' median {:.1f} ms "
        "({:+.0f}%), and every synchronous step waits for it",
        s.rank, s.work_p50_ms, s.median_work_p50_ms, s.excess_percent);
    return c;
  }
  c.verdict = CheckVerdict::ok;
  c.finding =
      fmt::format("no straggler: the slowest rank ({}) is {:+.1f}% against the median", s.rank, s.excess_percent);
  return c;
}

DiagnosisCheck check_loader(const Artifacts& a, bool starved, bool compute_slowed) {
  DiagnosisCheck c{5, "loader workers and CPU", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "an I/O-bound loader when the workers saturate the CPU (that needs a different fix)";
  const std::string workers = config_value(a.config, "workers");
  if (workers.empty()) {
    c.finding = "needs the run's config";
    return c;
  }
  int w = 0;
  try {
    w = std::stoi(workers);
  } catch (const std::exception&) {
    c.finding = "the run's config has workers " + quote_value(workers) + ", not a number";
    return c;
  }
  std::string cap;
  for (const auto& row : a.loader_rows) {
    if (!row.header.ok() || a.data.empty() || row.dataset.dir != a.data) continue;
    cap = fmt::format("; loader-bench measured {:.0f} samples/s with {} workers on this data set (run {})",
                      *row.loader_samples_per_s, row.workers, row.header.run_id);
  }
  std::string spent;
  if (a.final && a.final->loader) {
    const LoaderUse& l = *a.final->loader;
    const double samples = std::max(1.0, l.samples);
    const double read_us = l.read_cpu_s / samples * 1e6, decode_us = l.decode_cpu_s / samples * 1e6;
    const double rate = a.final->samples_per_s;
    spent = fmt::format(
        "; the readers spent {:.1f} us reading and {:.1f} us decoding per sample ({:.0f} samples): at "
        "{:.0f} samples/s that is {:.2f} cores",
        read_us, decode_us, samples, rate, (read_us + decode_us) * 1e-6 * rate);
  }
  c.evidence = fmt::format("{} loader worker{} on {} cores{}{}", w, w == 1 ? "" : "s", a.cores, spent, cap);
  if (!starved && compute_slowed && w > 0) {
    c.verdict = CheckVerdict::problem;
    c.finding = fmt::format(
        "the step waits little for data, but its compute slowed: {} loader worker{} decode on the "
        "same {} cores as the step (the decode cost moved into the step's time: see check 6)",
        w, w == 1 ? "" : "s", a.cores);
    return c;
  }
  if (!starved) {
    c.verdict = CheckVerdict::ok;
    c.finding = "the step is not starved: the loader keeps up";
    return c;
  }
  c.verdict = CheckVerdict::problem;
  c.finding = w == 0 ? "batches are loaded on the training thread (workers 0): the step pays for every decode"
              : w >= a.cores && a.cores > 0
                  ? "the workers already take every core: CPU-bound decoding; more workers cannot help (precompute, "
                    "a cheaper codec, or fewer bytes per sample)"
                  : "the loader is short of CPU time with spare cores: try more workers (trainlab loader-bench)";
  return c;
}

std::string layout_text(const DatasetInfo& info) {
  std::vector<double> sizes;
  std::uint64_t bytes = 0;
  for (const auto& f : info.files) {
    if (f.path == "manifest.json") continue;
    sizes.push_back(static_cast<double>(f.bytes));
    bytes += f.bytes;
  }
  return fmt::format("{}, {}{}, {} px, {} files, {:.1f} MiB, file size p50 {:.0f} B, max {:.0f} B",
                     disk_layout_name(info.layout), image_codec_name(info.codec),
                     info.codec == ImageCodec::jpeg ? fmt::format(" q{}", info.quality) : std::string(),
                     info.image.height, sizes.size(), static_cast<double>(bytes) / (1 << 20), percentile(sizes, 0.5),
                     sizes.empty() ? 0.0 : *std::max_element(sizes.begin(), sizes.end()));
}

DiagnosisCheck check_layout(const Artifacts& a, const std::optional<TrainRunRow>& earlier) {
  DiagnosisCheck c{6, "the data set's layout (what an export changed)", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "a coincidence: a storage-layout regression is the prime suspect when it coincides";
  if (a.config.empty()) {
    c.finding = "needs the run's config (the data set it read)";
    return c;
  }
  if (a.data.empty()) {
    c.finding = "SyntheticImages (in memory): no layout on disk";
    return c;
  }
  std::optional<DatasetInfo> now;
  try {
    now = read_dataset_info(a.data);
  } catch (const Error& e) {
    c.finding = std::string("cannot read the data set: ") + e.what();
    return c;
  }
  c.evidence = a.data + ": " + layout_text(*now);
  c.verdict = CheckVerdict::ok;
  c.finding = "one layout";
  if (earlier) {
    const std::string before = config_value(earlier->config, "data");
    if (before.empty() || before == a.data) {
      c.finding =
          before.empty() ? "the earlier run trained on SyntheticImages" : "the same data set as the earlier run";
      if (before.empty()) c.verdict = CheckVerdict::problem;
      return c;
    }
    try {
      const DatasetInfo was = read_dataset_info(before);
      c.evidence += "; earlier: " + before + ": " + layout_text(was);
      const bool changed = was.layout != now->layout || was.codec != now->codec ||
                           was.image.height != now->image.height || was.files.size() * 4 < now->files.size();
      if (changed) {
        c.verdict = CheckVerdict::problem;
        c.finding = fmt::format("the layout changed: {} {} {} files -> {} {} {} files", disk_layout_name(was.layout),
                                image_codec_name(was.codec), was.files.size() - 1, disk_layout_name(now->layout),
                                image_codec_name(now->codec), now->files.size() - 1);
      } else {
        c.finding = "the layout is the same as the earlier run's";
      }
    } catch (const Error& e) {
      c.evidence += std::string("; the earlier data set cannot be read: ") + e.what();
    }
  }
  return c;
}

DiagnosisCheck check_changes(const Artifacts& a, const std::optional<TrainRunRow>& earlier,
                             const std::string& against) {
  DiagnosisCheck c{7, "config and environment against an earlier run", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "\"nothing changed\" (something always changed)";
  if (against.empty()) {
    c.finding = "no earlier run named (--against RUN)";
    return c;
  }
  if (!earlier) {
    c.finding = "run " + against + " has no summary row in the ledger";
    return c;
  }
  std::vector<std::string> diffs;
  for (const auto& [key, value] : a.config) {
    const std::string was = config_value(earlier->config, key.c_str());
    if (value != was) diffs.push_back(key + ": " + (was.empty() ? "(absent)" : was) + " -> " + value);
  }
  if (a.final || !a.progress.empty()) {
    const Environment& now = a.final ? a.final->header.env : a.progress.front().header.env;
    const Environment& was = earlier->header.env;
    const auto text = [](const std::string& s) { return "\"" + s + "\""; };
    if (now.host != was.host) diffs.push_back("host: " + text(was.host) + " -> " + text(now.host));
    if (now.backend != was.backend) diffs.push_back("backend: " + text(was.backend) + " -> " + text(now.backend));
    if (now.threads != was.threads) diffs.push_back(fmt::format("threads: {} -> {}", was.threads, now.threads));
    if (now.cores != was.cores) diffs.push_back(fmt::format("cores: {} -> {}", was.cores, now.cores));
    if (now.engine() != was.engine()) diffs.push_back("engine: " + was.engine() + " -> " + now.engine());
  }
  c.evidence = diffs.empty() ? "no key differs" : fmt::format("{}", fmt::join(diffs, "; "));
  c.verdict = diffs.empty() ? CheckVerdict::ok : CheckVerdict::problem;
  c.finding = diffs.empty()
                  ? "the same config and environment as run " + against
                  : fmt::format("{} difference{} from run {}", diffs.size(), diffs.size() == 1 ? "" : "s", against);
  return c;
}

DiagnosisCheck check_checkpoint(const Artifacts& a) {
  DiagnosisCheck c{8, "checkpoint contents", CheckVerdict::not_applicable, "", "", ""};
  c.rules_out = "the belief that a loss bump after each restart is harmless";
  if (a.checkpoint.empty()) {
    c.finding = "the run saved no checkpoint";
    return c;
  }
  try {
    const CheckpointInspection r = inspect_checkpoint(a.checkpoint);
    std::vector<std::string> parts;
    // A part that is there but damaged says why (its detail), one that is absent just MISSING.
    for (const auto& p : r.parts) {
      const bool damaged = !p.present && p.detail.find("damaged") != std::string::npos;
      parts.push_back(p.name + (p.present ? "" : damaged ? " DAMAGED (" + p.detail + ")" : " MISSING"));
    }
    c.evidence = fmt::format("{} at step {}: {}", a.checkpoint, r.step, fmt::join(parts, ", "));
    const bool parts_present =
        std::all_of(r.parts.begin(), r.parts.end(), [](const CheckpointPart& p) { return p.present; });
    if (parts_present && !r.refused.empty()) {
      c.verdict = CheckVerdict::problem;
      c.evidence = a.checkpoint;
      c.finding = "REFUSED: --resume refuses it: " + r.refused;
    } else if (r.complete()) {
      c.verdict = CheckVerdict::ok;
      c.finding = "complete: model, optimiser, schedule, RNG and loader position";
    } else {
      c.verdict = CheckVerdict::problem;
      std::vector<std::string> missing;
      for (const auto& p : r.parts)
        if (!p.present) missing.push_back(p.name + " (" + p.if_missing + ")");
      c.finding = fmt::format("INCOMPLETE: a resume loses {}", fmt::join(missing, "; "));
    }
  } catch (const Error& e) {
    c.verdict = CheckVerdict::problem;
    c.finding = std::string("unusable: ") + e.what();
  }
  return c;
}

}  // namespace

Diagnosis diagnose(const DiagnoseOptions& o) {
  TL_CHECK(!o.target.empty(), "diagnose: name a run id, a trace (.json) or a checkpoint directory");
  Diagnosis d;
  d.target = o.target;
  const Artifacts a = gather(o, d.kind);
  d.warnings = a.warnings;
  std::optional<TrainRunRow> earlier;
  if (!o.against.empty()) {
    TL_CHECK(d.kind == "run", "diagnose: --against compares ledger runs; " + o.target + " is a " + d.kind);
    earlier = earlier_run(a, o.against);
  }
  if (a.final && a.final->header.ok()) {
    const double now = a.final->samples_per_s;
    d.throughput = fmt::format("throughput: {:.0f} samples/s over {} measured steps", now, a.final->measured_steps);
    if (earlier && earlier->samples_per_s > 0) {
      const double before = earlier->samples_per_s;
      d.throughput += fmt::format(", against {:.0f} in run {} ({:+.1f}%)", before, o.against, (now / before - 1) * 100);
    }
  }
  d.checks.push_back(check_liveness(a, o, d.kind));
  d.checks.push_back(check_shape(a));
  d.checks.push_back(check_breakdown(a, earlier));
  d.checks.push_back(check_ranks(a));
  const double phase_total = a.phases ? a.phases->total() : 0.0;
  const bool starved = d.checks[1].verdict == CheckVerdict::problem ||
                       (phase_total > 0 && a.phases->data_wait_s / phase_total > kStarvedRun);
  d.checks.push_back(check_loader(a, starved, d.checks[2].verdict == CheckVerdict::problem && !starved));
  d.checks.push_back(check_layout(a, earlier));
  d.checks.push_back(check_changes(a, earlier, o.against));
  d.checks.push_back(check_checkpoint(a));
  for (const auto& c : d.checks) {
    if (c.verdict == CheckVerdict::problem) {
      d.decided_by = c.number;
      d.cause = c.finding;
      break;
    }
  }
  if (d.decided_by == 0) d.cause = "no problem found by the checks that could run";
  return d;
}

std::string diagnosis_text(const Diagnosis& d) {
  std::string out = fmt::format(
      "diagnose {} ({}): seed 002's ordered checks, liveness -> shape -> distribution -> "
      "change history\n",
      d.target, d.kind);
  for (const auto& w : d.warnings) out += "warning: " + w + "\n";
  if (!d.throughput.empty()) out += d.throughput + "\n";
  for (const auto& c : d.checks) {
    out += fmt::format("{}. {:<48} {:<7} {}\n", c.number, c.name, check_verdict_name(c.verdict), c.finding);
    if (!c.evidence.empty()) out += fmt::format("   evidence: {}\n", c.evidence);
    if (c.verdict == CheckVerdict::ok) out += fmt::format("   rules out: {}\n", c.rules_out);
  }
  if (d.decided_by > 0) {
    out += fmt::format("decided by check {} ({}): {}\n", d.decided_by,
                       d.checks[static_cast<std::size_t>(d.decided_by - 1)].name, d.cause);
    std::vector<std::string> also;
    for (const auto& c : d.checks)
      if (c.verdict == CheckVerdict::problem && c.number != d.decided_by)
        also.push_back(fmt::format("{} ({})", c.number, c.finding));
    if (!also.empty()) out += fmt::format("also found: {}\n", fmt::join(also, "; "));
  } else {
    out += d.cause + "\n";
  }
  return out;
}

}  // namespace trainlab::bench
