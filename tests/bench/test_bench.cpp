// The bench layer: single-change enforcement, the ledger (append, interruption, device mixing),
// the statistics and the seed's false positive, skipped and failed rungs in the ledger and the
// report, and Chrome trace validity and nesting.
#include <sys/stat.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/report.h"
#include "engine/io/fileio.h"
#include "engine/train/trainer.h"
#include "studies/ladder/ladder.h"
#include "studies/memory/memory_study.h"
#include "studies/registry.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::bench;
using namespace trainlab::test;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const auto path = fs::temp_directory_path() / ("trainlab-bench-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(path);
  return path.string();
}

LadderSpec tiny_spec() {
  LadderSpec spec;
  spec.name = "test";
  spec.device = "cpu";
  spec.base = {
      {"batch", "8"}, {"lr", "0.01"}, {"train_samples", "64"}, {"eval_samples", "8"}, {"backend", "reference"}};
  spec.quick_steps = spec.full_steps = 2;
  spec.warmup = 1;
  spec.lr_rule.base_batch = 8;
  spec.rungs = {Rung{"baseline", {}, "", "", ""}, Rung{"workers", {{"workers", "1"}}, "", "", "one loader thread"}};
  return spec;
}

json row_on(const std::string& device, double value) {
  return {{"device", {{"type", "cpu"}, {"name", device}}}, {"versions", {{"engine", "x"}}}, {"value", value}};
}

}  // namespace

TEST_CASE("ladder: a rung that changes two knobs is refused, naming both", "[bench]") {
  const LrRule rule{8, 0.01};
  const TrainConfig base = config_from({{"batch", "8"}, {"lr", "0.01"}, {"workers", "0"}, {"layout", "nchw"}}, "t");
  TrainConfig two = base;
  two.data.workers = 2;
  two.execution.layout = MemoryFormat::channels_last;
  REQUIRE_THROWS_CONTAINING(single_change(base, two, rule, "both"), "rung 'both' changes 2 knobs",
                            "layout (nchw -> nhwc)", "workers (0 -> 2)");
  // batch with the LR its rule gives is one change...
  TrainConfig batch = base;
  batch.batch = 32;
  batch.optimizer.lr = 0.04;
  const auto change = single_change(base, batch, rule, "batch32");
  REQUIRE(change);
  CHECK(change->knob == "batch (+ LR rule)");
  // ... and any other LR is a second knob.
  batch.optimizer.lr = 0.05;
  REQUIRE_THROWS_CONTAINING(single_change(base, batch, rule, "batch32"), "batch (8 -> 32)", "lr (0.01 -> 0.05)");
  // The rule is anchored at the base point whatever its base_batch: 16 at lr 0.01 -> 64 at 0.04,
  // and the generated batch rung passes the single-change check.
  LadderSpec spec = tiny_spec();
  spec.base["batch"] = "16";
  spec.lr_rule.base_batch = 32;
  spec.rungs = {Rung{"baseline", {}, "", "", ""}, Rung{"batch64", {{"batch", "64"}}, "", "", ""}};
  const auto configs = rung_configs(spec, "cpu");
  CHECK(configs[1].optimizer.lr == Approx(0.04));
  CHECK(single_change(configs[0], configs[1], spec.lr_rule, "batch64"));
  // With a warm-up in the rule, the batch rung that raises the LR warms up too, as the same change;
  // a warm-up of another length is a knob of its own.
  spec.lr_rule.warmup_steps = 10;
  const auto warmed = rung_configs(spec, "cpu");
  CHECK(warmed[1].optimizer.warmup_steps == 10);
  CHECK(warmed[0].optimizer.warmup_steps == 0);
  const auto warm_change = single_change(warmed[0], warmed[1], spec.lr_rule, "batch64");
  REQUIRE(warm_change);
  CHECK(warm_change->knob == "batch (+ LR rule, warm-up)");
  CHECK(warm_change->to == "64 (lr 0.04, 10-step warm-up)");
  TrainConfig other_warmup = warmed[1];
  other_warmup.optimizer.warmup_steps = 7;
  REQUIRE_THROWS_CONTAINING(single_change(warmed[0], other_warmup, spec.lr_rule, "batch64"), "changes 3 knobs",
                            "warmup_steps (0 -> 7)");
  // Bookkeeping keys are not knobs.
  TrainConfig steps = base;
  steps.steps = 999;
  CHECK_FALSE(single_change(base, steps, rule, "none"));

  // A ladder file whose rung sets two knobs is refused when loaded.
  const std::string path = temp_path("two.yaml");
  std::ofstream(path) << "ladder: t\ndevice: cpu\nbase: {batch: 8}\nrungs:\n  - name: baseline\n  - name: both\n"
                         "    set: {workers: 2, layout: nhwc}\n";
  REQUIRE_THROWS_CONTAINING(load_ladder(path), "rung 'both' changes 2 knobs");
  std::ofstream(path, std::ios::trunc) << "ladder: t\ndevice: cpu\nbase: {batch: 8, workerz: 1}\nrungs:\n  - name: b\n";
  REQUIRE_THROWS_CONTAINING(load_ladder(path), "unknown key 'workerz'");
  fs::remove(path);
}

namespace {
LadderRungRow guard_row(const std::string& rung, std::int64_t index, std::vector<double> accuracies) {
  LadderRungRow row;
  row.header.status = "ok";
  row.arm.rung = rung;
  row.arm.rung_index = index;
  row.repeats = {100, 101, 102};
  row.stats = summarize(row.repeats);
  row.arm.breakdown = Breakdown{};
  row.arm.held_out_accuracies = std::move(accuracies);
  if (!row.arm.held_out_accuracies.empty()) row.arm.held_out_accuracy = summarize(row.arm.held_out_accuracies).median;
  return row;
}
}  // namespace

TEST_CASE("ladder: the accuracy guard marks a rung that stops training, against the seeds' spread", "[bench]") {
  std::vector<LadderRungRow> rows = {guard_row("baseline", 0, {0.40, 0.42, 0.44}),
                                     guard_row("bf16", 1, {0.39, 0.41, 0.43}),  // the same, another rounding
                                     guard_row("broken", 2, {0.10, 0.12, 0.09}),
                                     guard_row("after", 3, {0.37, 0.40, 0.38}),  // below 0.39 by less than 0.05
                                     guard_row("one_seed", 4, {0.05})};
  accuracy_guard(rows);
  CHECK_FALSE(rows[0].arm.breaks_training);
  CHECK_FALSE(rows[1].arm.breaks_training);
  CHECK(rows[2].arm.breaks_training);
  CHECK(rows[2].arm.accuracy_check.find("BREAKS TRAINING: held-out accuracy 10.0%") != std::string::npos);
  // Checked against the baseline and the last rung that trains (bf16), not the broken one.
  CHECK_FALSE(rows[3].arm.breaks_training);
  CHECK(rows[3].arm.accuracy_check.find("the baseline's and bf16's") != std::string::npos);
  CHECK_FALSE(rows[4].arm.breaks_training);
  CHECK(rows[4].arm.accuracy_check.find("not checked") != std::string::npos);
  const std::string table = ladder_table(rows, true);
  CHECK(table.find("| broken | 101.0 |") != std::string::npos);
  CHECK(table.find("breaks training: not a gain") != std::string::npos);
  CHECK(table.find("broken: BREAKS TRAINING") != std::string::npos);
  // A narrower drop is within the spread: 0.30 is 0.09 below the lowest seed (0.39), the spread 0.05.
  rows[3].arm.held_out_accuracies = {0.30, 0.30, 0.31};
  accuracy_guard(rows);
  CHECK(rows[3].arm.breaks_training);
}

TEST_CASE("ladder: a planted rung that zeroes the learning rate is marked as breaking training", "[bench]") {
  LadderSpec spec;
  spec.name = "guard";
  spec.device = "cpu";
  spec.base = {{"batch", "32"},         {"lr", "0.01"},   {"train_samples", "2048"},
               {"eval_samples", "500"}, {"workers", "0"}, {"seed", "0"}};
  spec.quick_steps = spec.full_steps = 40;
  spec.warmup = 2;
  spec.rungs = {Rung{"baseline", {}, "", "", ""},
                Rung{"lr_zero", {{"lr", "1e-9"}}, "", "", "planted: the learning rate all but zero"}};
  const std::string dir = temp_path("guard");
  LadderOptions options;
  options.repeats = 3;
  options.quick = true;
  options.ledger_path = dir + "/ledger_cpu.jsonl";
  const LadderRun run = run_ladder(spec, options);
  REQUIRE(run.rung_rows.size() == 2);
  const LadderRungRow& baseline = run.rung_rows[0];
  const LadderRungRow& zero = run.rung_rows[1];
  INFO(baseline.arm.accuracy_check);
  INFO(zero.arm.accuracy_check);
  REQUIRE(baseline.arm.held_out_accuracies.size() == 3);
  CHECK(zero.arm.held_out_accuracies.size() == 3);
  CHECK_FALSE(baseline.arm.breaks_training);
  CHECK(zero.arm.breaks_training);  // read back from the ledger: the row says so
  CHECK(ladder_table(run.rung_rows, false).find("breaks training: not a gain") != std::string::npos);
  // The README's headline row of the run names the rung, and never quotes its gain as the largest.
  const Ledger::Loaded loaded = Ledger(options.ledger_path).load();
  std::vector<std::string> warnings;
  const auto section = ladder_report_section().build(SectionInput{loaded, "", warnings});
  REQUIRE(section);
  REQUIRE(section->headline.size() == 1);
  INFO(section->headline[0].figure);
  CHECK(section->headline[0].figure.find("breaks training: `lr_zero`") != std::string::npos);
  CHECK(section->headline[0].figure.find("no rung measured against another") != std::string::npos);
  CHECK(section->headline[0].run_id == run.run_id);
  fs::remove_all(dir);
}

TEST_CASE("ladder: the shipped ladders load, and their LR follows the rule", "[bench]") {
  for (const char* device : {"cpu", "cuda"}) {
    const LadderSpec spec = load_ladder(std::string(TRAINLAB_SOURCE_DIR) + "/configs/ladder_" + device + ".yaml");
    const auto configs = rung_configs(spec);
    REQUIRE(configs.size() == spec.rungs.size());
    CHECK(spec.rungs.front().name == "baseline");
    for (std::size_t i = 0; i < spec.rungs.size(); ++i) {
      if (spec.rungs[i].name == "batch128") CHECK(configs[i].optimizer.lr == Approx(0.04));
    }
  }
}

TEST_CASE("ledger: append and reload; another device is refused", "[bench]") {
  const Ledger ledger(temp_path("ledger.jsonl"));
  for (int i = 0; i < 5; ++i) ledger.append(row_on("cpu A", i));
  const auto loaded = ledger.load();
  REQUIRE(loaded.rows.size() == 5);
  CHECK(loaded.rows[3]["value"] == 3);
  CHECK(loaded.rows[0]["schema"] == kLedgerSchema);
  CHECK(loaded.warnings.empty());
  REQUIRE_THROWS_CONTAINING(ledger.append(row_on("cpu B", 9)), "cpu A", "cpu B", "own ledger");
  fs::remove(ledger.path());
}

TEST_CASE("ledger: a path holding something other than a ledger is refused, and left as it was", "[bench]") {
  // A user's notes, a report, a directory: refused when the ledger is opened, before any tool
  // measures, in one line naming the path; the file is unchanged (issue 49).
  const std::string notes = temp_path("notes.txt");
  std::ofstream(notes) << "my notes\nsecond line\n";
  const std::string said = "ledger '" + notes + "' is not a ledger";
  REQUIRE_THROWS_CONTAINING(Ledger{notes}, said.c_str(), "'my notes'");
  const auto bytes = read_file(notes);
  CHECK(std::string(bytes.begin(), bytes.end()) == "my notes\nsecond line\n");
  const std::string dir = temp_path("ledger_dir");
  fs::create_directories(dir);
  REQUIRE_THROWS_CONTAINING(Ledger{dir}, "a ledger is a regular file");
  // A ledger whose only row was torn by an interrupted first write is still a ledger, and an
  // empty file or nothing at all is a new one.
  const std::string torn = temp_path("torn.jsonl");
  std::ofstream(torn) << "{\"schema\":1,\"devi";
  CHECK_NOTHROW(Ledger{torn}.append_json(row_on("cpu A", 1)));
  CHECK(Ledger{torn}.load().rows.size() == 1);
  const std::string empty = temp_path("empty.jsonl");
  std::ofstream{empty};
  CHECK_NOTHROW(Ledger{empty}.append_json(row_on("cpu A", 1)));
  for (const auto& p : {notes, torn, empty}) fs::remove(p);
  fs::remove_all(dir);
}

TEST_CASE("ledger: an interrupted writer loses at most the row in flight", "[bench]") {
  const Ledger ledger(temp_path("killed.jsonl"));
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (int i = 0;; ++i) ledger.append(row_on("cpu A", i));  // until killed
  }
  // Let it write some rows, then kill it mid-stream.
  for (int waited = 0; waited < 200; ++waited) {
    ::usleep(10000);
    std::error_code ec;
    if (fs::exists(ledger.path(), ec) && fs::file_size(ledger.path(), ec) > 4000) break;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  const auto loaded = ledger.load();
  REQUIRE(loaded.rows.size() >= 5);
  for (std::size_t i = 0; i < loaded.rows.size(); ++i) CHECK(loaded.rows[i]["value"] == static_cast<int>(i));
  // A torn last line (as a crash mid-write leaves) is dropped with a warning; earlier rows stand.
  std::ofstream(ledger.path(), std::ios::app) << R"({"device": {"name": "cpu A"}, "val)";
  const auto torn = ledger.load();
  CHECK(torn.rows.size() == loaded.rows.size());
  REQUIRE(torn.warnings.size() == 1);
  CHECK(torn.warnings[0].find("interrupted") != std::string::npos);
  // The next run's first append cuts the torn row off and starts on a line of its own.
  ledger.append(row_on("cpu A", 99));
  const auto resumed = ledger.load();
  CHECK(resumed.warnings.empty());
  REQUIRE(resumed.rows.size() == loaded.rows.size() + 1);
  CHECK(resumed.rows.back()["value"] == 99);
  // Damage in the middle is reported with its line number and skipped, not silently and not fatally:
  // the rows after it still load, and a new run still appends.
  std::ofstream(ledger.path(), std::ios::app) << R"({"device": {"name": "cpu A"}, "val)"
                                              << "\n";
  ledger.append(row_on("cpu A", 100));
  const auto damaged = ledger.load();
  REQUIRE(damaged.warnings.size() == 1);
  const std::string damaged_line = "line " + std::to_string(loaded.rows.size() + 2) + " skipped: damaged";
  CHECK(damaged.warnings[0].find(damaged_line) != std::string::npos);
  REQUIRE(damaged.rows.size() == resumed.rows.size() + 1);
  CHECK(damaged.rows.back()["value"] == 100);
  fs::remove(ledger.path());
}

TEST_CASE("ledger: rows of the right schema with wrong types are skipped with their line, never an abort", "[bench]") {
  const Ledger ledger(temp_path("typed.jsonl"));
  // A well-formed ladder run first.
  json good = row_on("cpu A", 0);
  good["kind"] = "rung";
  good["run_id"] = "r1";
  good["rung"] = "baseline";
  good["rung_index"] = 0;
  good["status"] = "skipped";
  good["versions"] = {{"engine", "e"}};
  ledger.append(good);
  // Then every damage the fault-injection run found, each on its own line.
  const std::vector<std::string> bad = {
      R"({"schema": [1], "device": {"name": "cpu A"}})",
      R"({"schema": 1, "device": {"name": "cpu A", "type": "cpu"}, "kind": "rung", "run_id": "r1", "rung": "x", "rung_index": 1,
          "status": "ok", "versions": {"engine": "e"}})",
      R"({"schema": 1, "device": {"name": "cpu A", "type": "cpu"}, "kind": "rung", "run_id": 7, "rung": "x", "rung_index": 1,
          "status": "skipped", "versions": {"engine": "e"}})",
      R"({"schema": 1, "device": {"name": "cpu A"}, "kind": "allreduce", "run_id": "a", "status": "ok",
          "config": {"algorithm": "ring", "ranks": 2, "bytes": 4}, "stats": {"median": "fast"}})",
      R"({"schema": 1, "device": "cpu A"})",
      R"({"schema": 2, "device": {"name": "cpu A"}})",
      R"("just a string")",
  };
  {
    std::ofstream out(ledger.path(), std::ios::app);
    for (std::string line : bad) {
      line.erase(std::remove(line.begin(), line.end(), '\n'), line.end());
      out << line << "\n";
    }
  }
  // Loading checks what every row needs (a JSON object, the schema, where it was measured); a row's
  // own fields are checked when it is read into its kind's struct.
  const auto loaded = ledger.load();
  REQUIRE(loaded.rows.size() == 3);  // the good row, and the two whose damage is in their kind's fields
  const std::vector<std::string> expected = {
      "line 2 skipped: schema is [1]", "line 4 skipped: run_id is 7, not a string",
      "line 6 skipped: device is \"cpu A\", not an object", "line 7 skipped: schema 2 (this build reads schema 1)",
      "line 8 skipped: not a JSON object"};
  REQUIRE(loaded.warnings.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO(loaded.warnings[i]);
    CHECK(loaded.warnings[i].find(expected[i]) != std::string::npos);
  }
  std::vector<std::string> read_warnings;
  const auto rungs = loaded.read<LadderRungRow>(&read_warnings);
  REQUIRE(rungs.size() == 1);
  CHECK(rungs[0].arm.rung == "baseline");
  REQUIRE(read_warnings.size() == 1);
  CHECK_THAT(read_warnings[0], Catch::Contains("line 3 skipped: no repeats"));
  // A new run still appends, and the report still reads its run.
  json next = good;
  next["run_id"] = "20261130T000001Z-2";
  ledger.append(next);
  CHECK(ledger.load().rows.size() == 4);
  // The same line twice (a ledger appended to itself) is read once, with a warning.
  const auto bytes = read_file(ledger.path());
  const std::string text(bytes.begin(), bytes.end());
  write_file_atomic(ledger.path(), text + text);
  const auto doubled = ledger.load();
  CHECK(doubled.rows.size() == 4);
  CHECK(std::any_of(doubled.warnings.begin(), doubled.warnings.end(),
                    [](const std::string& w) { return w.find("repeats line") != std::string::npos; }));
  fs::remove(ledger.path());
}

TEST_CASE("ledger: a path that is not a regular file is refused, never read or appended to", "[bench]") {
  const std::string fifo = temp_path("ledger.fifo");
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_CONTAINING(Ledger(fifo).load(), "is a FIFO, not a regular file");
  REQUIRE_THROWS_CONTAINING(Ledger(fifo).append(row_on("cpu A", 1)), "is a FIFO");
  fs::remove(fifo);
  REQUIRE_THROWS_CONTAINING(Ledger("/dev/null").append(row_on("cpu A", 1)), "is a character device");
  const std::string dir = temp_path("ledger.dir");
  fs::create_directories(dir);
  REQUIRE_THROWS_CONTAINING(Ledger(dir).append(row_on("cpu A", 1)), "directory");
  fs::remove_all(dir);
}

TEST_CASE("statistics: medians, separability and the calibration arms", "[bench]") {
  const Summary s = summarize({3, 1, 2, 10});
  CHECK(s.median == 2.5);
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(s.mean == 4);
  CHECK(s.std == Approx(4.0825).epsilon(1e-4));
  CHECK(effect_percent(summarize({110}), summarize({100})) == Approx(10));
  CHECK(separable(summarize({1, 2}), summarize({3, 4})));
  CHECK_FALSE(separable(summarize({1, 3}), summarize({2, 4})));
  // Ranges that just touch share a value: not separable, either way round (a `<` turned into `<=`
  // would call them separable).
  CHECK_FALSE(separable(summarize({1, 2}), summarize({2, 3})));
  CHECK_FALSE(separable(summarize({2, 3}), summarize({1, 2})));
  CHECK(separable(summarize({1, 2}), summarize({2.0000001, 3})));

  // The seed's 3-repeat false positive: two identical configurations whose ranges did not
  // overlap (48.9-67.0 vs 81.9-92.5). The test is unsound there, so nothing is concluded.
  const Calibration false_positive = calibrate({48.9, 60.2, 67.0}, {81.9, 88.0, 92.5});
  CHECK_FALSE(false_positive.valid);
  CHECK(false_positive.noise_floor_percent > 30);
  CHECK(verdict(summarize({140, 141}), summarize({88, 90}), false_positive) == Verdict::no_conclusion);
  // At 7 repeats the arms overlapped, as identical arms must, and verdicts stand.
  const Calibration sound =
      calibrate({87.8, 79.2, 105.2, 90.0, 84.1, 95.3, 88.6}, {99.5, 65.3, 129.0, 92.0, 85.0, 101.0, 97.0});
  CHECK(sound.valid);
  CHECK(verdict(summarize({129.4, 140.6, 146.3}), summarize({79.2, 87.8, 105.2}), sound) == Verdict::separable);
  CHECK(verdict(summarize({100, 110}), summarize({105, 115}), sound) == Verdict::not_separable);
  CHECK(std::string(verdict_text(Verdict::no_conclusion)) == "NO CONCLUSION");
  // One repeat per side: no verdict at all.
  CHECK(verdict(summarize({200}), summarize({100}), std::nullopt) == Verdict::too_few_repeats);
}

TEST_CASE("memory study: effects against each batch's control, in units of the noise floor", "[bench]") {
  // Made-up rows: the control twice (medians 10.5 and 11.3 ms, ranges overlapping: a 7.3% floor),
  // recompute convs 28.6% slower with a smaller peak, zero 1 inside the floor with less optimizer state.
  auto row = [](const std::string& arm, std::int64_t batch, const std::string& recompute, int zero, double step_s,
                std::int64_t peak, std::int64_t optimizer_state) {
    MemoryRepeatRow r;
    r.header.kind = MemoryRepeatRow::kKind;
    r.header.status = "ok";
    r.arm = arm;
    r.config.batch = batch;
    r.config.recompute = recompute;
    r.config.zero = zero;
    r.step_s_median = step_s;
    r.memory_per_rank.peak_bytes = {{"optimizer_state", optimizer_state}};
    r.memory_per_rank.at_peak_bytes = {{"activations", peak / 2}};
    r.memory_per_rank.total_peak_bytes = peak;
    r.memory_per_rank.peak_phase = "backward";
    r.memory_per_rank.activations_after_forward_bytes = peak / 4;
    return r;
  };
  std::vector<MemoryRepeatRow> rows;
  for (double jitter : {0.0, 0.0005, 0.0010}) {
    rows.push_back(row("b64 none z0", 64, "none", 0, 0.0100 + jitter, 1000, 80));
    rows.push_back(row("b64 none z0 again", 64, "none", 0, 0.0108 + jitter, 1000, 80));
    rows.push_back(row("b64 convs z0", 64, "convs", 0, 0.0130 + jitter, 800, 80));
    rows.push_back(row("b64 none z1", 64, "none", 1, 0.0104 + jitter, 960, 40));
  }
  const MemoryAnalysis a = analyse_memory(memory_arms_from_rows(rows));
  REQUIRE(a.arms.size() == 4);
  CHECK(a.arms[2].repeats_agree);
  CHECK(a.calibration.valid);
  CHECK(a.separability_test_valid);
  CHECK(a.calibration.noise_floor_percent == Approx(100.0 * 0.8 / 10.9).epsilon(1e-6));
  CHECK(a.control == std::vector<int>{0, 0, 0, 0});
  CHECK(a.effects[2].step_percent == Approx(100.0 * (13.5 / 10.5 - 1.0)).epsilon(1e-6));
  CHECK(a.effects[2].floor_multiple ==
        Approx(100.0 * (13.5 / 10.5 - 1.0) / a.calibration.noise_floor_percent).epsilon(1e-6));
  CHECK(a.effects[2].verdict == Verdict::separable);
  CHECK(a.effects[2].peak_percent == Approx(-20.0));
  CHECK(a.effects[3].verdict == Verdict::not_separable);
  const std::string table = memory_table(a, true), findings = memory_findings(a);
  CHECK(table.find("calibration pair") != std::string::npos);
  CHECK(findings.find("recompute convs, zero 0: batch 64: peak 0.00 -> 0.00 MiB (-20.0%)") != std::string::npos);
  // The figure: the peak's categories stacked per arm beside peak against step time.
  const chart::Figure figure = memory_figure(a, "t");
  REQUIRE(figure.panels.size() == 2);
  CHECK(std::get<chart::BarChart>(figure.panels[0]).rows.size() == 4);
  CHECK(std::get<chart::Scatter>(figure.panels[1]).points.size() == 4);
  CHECK(chart::render(figure).find("</svg>") != std::string::npos);
  // No estimates in these rows (as in rows written before them): no three-ways table.
  CHECK(memory_transient_table(a, true).empty());
  // With them: the control batch's stages and recompute levels, seed 003 / estimator / measured.
  for (MemoryRepeatRow& r : rows) {
    r.config.world = 2;
    r.config.per_rank_batch = 32;
    r.memory_per_rank.peak_bytes["activations"] = 3 << 20;
    r.memory_per_rank.peak_bytes["communication"] = r.config.zero == 1 ? 16 : 0;
    r.memory_per_rank.formula_bytes = std::map<std::string, double>{{"activations", 4 << 20}};
    r.memory_per_rank.estimated_bytes = std::map<std::string, double>{
        {"activations", 3 << 20},
        {"activations_saved", static_cast<double>(r.memory_per_rank.activations_after_forward_bytes)},
        {"communication", r.config.zero == 1 ? 16 : 8}};
  }
  const std::string transient = memory_transient_table(analyse_memory(memory_arms_from_rows(rows)), true);
  CHECK(transient.find(
            "| 0 | none | 2 | 32 | 4.00 / 250 B / 250 B | 3.00 / 3.00 | exact | - / 8 B / 0.00 | measured none |") !=
        std::string::npos);
  CHECK(
      transient.find("| 1 | none | 2 | 32 | 4.00 / 240 B / 240 B | 3.00 / 3.00 | exact | - / 16 B / 16 B | exact |") !=
      std::string::npos);
  CHECK(transient.find("| 0 | convs | 2 | 32 |") != std::string::npos);
  CHECK(transient.find("| 0 | none |") == transient.rfind("| 0 | none |"));  // the control once, not its pair
  // Without the pair there is no floor: refused, naming it.
  rows.erase(
      std::remove_if(rows.begin(), rows.end(), [](const MemoryRepeatRow& r) { return r.arm == "b64 none z0 again"; }),
      rows.end());
  REQUIRE_THROWS_CONTAINING(analyse_memory(memory_arms_from_rows(rows)), "no calibration pair");
}

TEST_CASE("ladder: skipped and failed rungs appear in the ledger and the report", "[bench]") {
  LadderSpec spec = tiny_spec();
  spec.rungs.push_back(Rung{"pin_memory", {{"pin_memory", "true"}}, "cuda", "needs a GPU to copy to", ""});
  spec.rungs.push_back(Rung{"tf32", {{"tf32", "true"}}, "", "", ""});  // not marked: it crashes, and is recorded
  spec.rungs.push_back(Rung{"prefetch", {{"prefetch", "3"}}, "", "", ""});
  const std::string dir = temp_path("ladder");
  LadderOptions options;
  options.repeats = 2;
  options.quick = true;
  options.calibrate = true;
  options.ledger_path = dir + "/ledger_cpu.jsonl";
  const LadderRun run = run_ladder(spec, options);
  std::map<std::string, std::string> status;
  for (const auto& row : run.rung_rows) status[row.arm.rung] = row.header.status;
  CHECK(status["baseline"] == "ok");
  CHECK(status["workers"] == "ok");
  CHECK(status["pin_memory"] == "skipped");
  CHECK(status["tf32"] == "failed");
  CHECK(status["prefetch"] == "failed");  // the chain carries tf32: true, which this device cannot run
  CHECK(status["calibration A"] == "ok");
  for (const auto& row : run.rung_rows) {
    if (row.arm.rung == "workers") {
      CHECK(row.repeats.size() == 2);
      REQUIRE(row.arm.changed);
      CHECK(row.arm.changed->knob == "workers");
      CHECK(row.arm.warmup_steps_excluded == 1);
      CHECK(row.header.env.device.type == "cpu");
      CHECK(row.header.env.timer == "steady_clock");
      CHECK(row.header.env.versions.count("engine") == 1);
      REQUIRE(row.arm.breakdown);
      CHECK(row.arm.breakdown->data_wait.seconds_per_step >= 0);
    }
    if (row.arm.rung == "tf32") CHECK(row.arm.error.find("tf32 needs a CUDA backend") != std::string::npos);
  }
  const std::string table = ladder_table(run.rung_rows, false);
  CHECK(table.find("skipped: needs a GPU to copy to") != std::string::npos);
  CHECK(table.find("failed: tf32 needs a CUDA backend") != std::string::npos);
  CHECK(table.find("noise floor") != std::string::npos);

  ReportOptions report;
  report.ledger_path = options.ledger_path;
  report.out_path = dir + "/REPORT.md";
  const std::string md = write_report(report, report_sections());
  CHECK(md.find(run.run_id) != std::string::npos);
  CHECK(md.find("| pin_memory | skipped: needs a GPU to copy to") != std::string::npos);
  CHECK(md.find("| tf32 | failed: tf32 needs a CUDA backend") != std::string::npos);
  CHECK(md.find("noise floor") != std::string::npos);
  CHECK(fs::exists(dir + "/figures/ladder_test_" + run.run_id + ".svg"));
  fs::remove_all(dir);
}

TEST_CASE("trace: valid Chrome trace JSON whose spans nest and cover each step", "[bench][trace]") {
  const std::string path = temp_path("trace") + "/run.json";
  TrainConfig c;
  c.steps = 4;
  c.batch = 8;
  c.data.train_samples = 64;
  c.data.workers = 1;
  c.execution.backend = "reference";
  c.reporting.eval_at_end = false;
  c.reporting.log_every = 100;
  c.reporting.trace = path;
  Trainer(c).train(nullptr);
  const auto bytes = read_file(path);
  const json trace = json::parse(bytes.begin(), bytes.end());
  REQUIRE(trace.contains("traceEvents"));
  std::map<int, std::vector<json>> by_thread;
  std::map<int, std::string> names;
  for (const auto& e : trace["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    // Real work takes time: a step and its phases have a duration (in microseconds) above zero.
    const std::string name = e["name"];
    if (name == "step" || name == "forward" || name == "backward" || name == "optimizer") {
      CHECK(e["dur"].get<double>() > 0);
    }
    REQUIRE(e["dur"].get<double>() >= 0);
    by_thread[e["tid"]].push_back(e);
  }
  bool worker_track = false;
  for (const auto& [tid, name] : names) worker_track = worker_track || name.rfind("loader worker", 0) == 0;
  CHECK(worker_track);
  int steps = 0;
  for (auto& [tid, events] : by_thread) {
    // On one thread, any two spans are disjoint or one contains the other.
    for (std::size_t i = 0; i < events.size(); ++i) {
      const double a0 = events[i]["ts"], a1 = a0 + events[i]["dur"].get<double>();
      for (std::size_t j = i + 1; j < events.size(); ++j) {
        const double b0 = events[j]["ts"], b1 = b0 + events[j]["dur"].get<double>();
        const bool disjoint = a1 <= b0 || b1 <= a0;
        const bool nested = (a0 <= b0 && b1 <= a1) || (b0 <= a0 && a1 <= b1);
        if (!(disjoint || nested))
          FAIL("spans '" << events[i]["name"] << "' and '" << events[j]["name"] << "' overlap");
      }
    }
    // Each step is covered by its four phases.
    for (const auto& step : events) {
      if (step["name"] != "step") continue;
      ++steps;
      const double s0 = step["ts"], s1 = s0 + step["dur"].get<double>();
      double covered = 0;
      for (const auto& e : events) {
        const std::string n = e["name"];
        if (n != "data_wait" && n != "forward" && n != "backward" && n != "optimizer") continue;
        const double e0 = e["ts"], e1 = e0 + e["dur"].get<double>();
        if (e0 >= s0 && e1 <= s1) covered += e1 - e0;
      }
      CHECK(covered >= 0.95 * (s1 - s0));
    }
  }
  CHECK(steps == 4);
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("chart: a timeline draws each lane's intervals to scale, labelled where they fit", "[bench]") {
  chart::Timeline t;
  t.title = "1f1b, m = 2";
  t.width = 400;
  t.lanes = {{"stage 0", {{0, 10, chart::kBlue, "F0"}, {10, 20, chart::kBlue, "F1"}, {30, 40, chart::kRed, "B0"}}},
             {"stage 1", {{10, 20, chart::kBlue, "F0"}, {20, 30, chart::kRed, "B0"}, {39, 40, chart::kRed, "B1"}}}};
  const std::string svg = chart::render({"timeline", {t}, {}});
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find(">stage 1</text>") != std::string::npos);
  CHECK(svg.find(">B0</text>") != std::string::npos);
  // 40 ms over 400 px: the 1 ms box of B1 is 10 px wide, too narrow for its label.
  CHECK(svg.find(R"(width="10.0" height="22.0" fill="#d1495b")") != std::string::npos);
  CHECK(svg.find(">B1</text>") == std::string::npos);
}
