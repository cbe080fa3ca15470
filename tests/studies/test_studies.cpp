// The studies' logic (seed 000's cost-to-accuracy and pinning studies): the stop rule, both
// rankings and the over-rated configuration on hand-made rows, the break-even arithmetic, the
// affinity actually applied (read back), and the NO CONCLUSION gate on made-up arms. And the seed
// studies' typed rows (pinning, memory, data set, PyTorch): the committed ledger reads into them
// and writes back unchanged, and a damaged row is skipped with its line, never an aborted report.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/affinity.h"
#include "bench/measure/data_source.h"
#include "bench/report/chart.h"
#include "bench/report/report.h"
#include "bench/report/table.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic_images.h"
#include "engine/io/fileio.h"
#include "engine/train/trainer.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/compare_torch/compare_torch.h"
#include "studies/cost_to_accuracy/cost_study.h"
#include "studies/dataset/dataset_study.h"
#include "studies/ladder/ladder.h"
#include "studies/memory/memory_study.h"
#include "studies/pinning/pinning_study.h"
#include "studies/registry.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

std::vector<EvalResult> evals_of(const std::vector<double>& accuracies) {
  std::vector<EvalResult> out;
  for (std::size_t i = 0; i < accuracies.size(); ++i) {
    EvalResult e;
    e.step = static_cast<std::int64_t>(25 * (i + 1));
    e.accuracy = accuracies[i];
    out.push_back(e);
  }
  return out;
}

CostRepeat reached(double sps, std::int64_t steps) { return {sps, steps, true, false, ""}; }
CostRepeat missed(double sps) { return {sps, 0, false, false, ""}; }

const CostRow& row_named(const CostAnalysis& a, const std::string& name) {
  for (const auto& r : a.rows)
    if (r.name == name) return r;
  throw Error("no row " + name);
}

// The committed ledger of a machine that ran every seed study (pinning, memory, data set, PyTorch),
// one row a line. The sanitizer pass (TRAINLAB_TEST_QUICK) keeps the runs the committed REPORT.md
// shows (the latest of each section, named in its text): the ledger grows every session, and make
// test reads back every row of it.
std::vector<std::string> committed_lines() {
  const std::string dir = std::string(TRAINLAB_SOURCE_DIR) + "/bench/results/amd_epyc/";
  std::vector<std::string> lines;
  std::ifstream in(dir + "ledger_cpu.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (std::getenv("TRAINLAB_TEST_QUICK") == nullptr) return lines;
  std::ifstream report_in(dir + "REPORT.md");
  const std::string report((std::istreambuf_iterator<char>(report_in)), std::istreambuf_iterator<char>());
  std::set<std::string> shown;  // run ids: 20261207T185056Z-14542
  const std::regex run_id("[0-9]{8}T[0-9]{6}Z-[0-9]+");
  for (auto it = std::sregex_iterator(report.begin(), report.end(), run_id); it != std::sregex_iterator(); ++it)
    shown.insert(it->str());
  std::vector<std::string> kept;
  for (const std::string& line : lines) {
    const std::string key = "\"run_id\":\"";
    const std::size_t at = line.find(key);
    const std::string id = at == std::string::npos
                               ? std::string()
                               : line.substr(at + key.size(), line.find('"', at + key.size()) - at - key.size());
    if (id.empty() || shown.count(id) == 1) kept.push_back(line);
  }
  return kept;
}

const Ledger::Loaded& committed_ledger() {
  static const Ledger::Loaded loaded = [] {
    const auto path =
        std::filesystem::temp_directory_path() / ("trainlab-committed-" + std::to_string(::getpid()) + ".jsonl");
    {
      std::ofstream out(path);
      for (const std::string& line : committed_lines()) out << line << "\n";
    }
    Ledger::Loaded read = Ledger(path.string()).load();
    std::filesystem::remove(path);
    return read;
  }();
  return loaded;
}

// Every row of Row's kind reads into its struct without a warning and writes back the JSON it was
// read from: each key with the same value of the same type (compared as text), nested alike; new
// beside them only the environment's keys that an older writer (or compare_torch.py) leaves out.
// Returns how many rows there were.
// `back` without the keys a newer writer adds where `original` (at any depth) lacks them: the
// model a row trained (model, model_options), which rows from before --model lack; they read as
// the default, smallcnn, and write it back.
json without_new_keys(json back, const json& original) {
  if (!back.is_object() || !original.is_object()) return back;
  for (const char* key : {"model", "model_options"})
    if (!original.contains(key)) back.erase(key);
  for (auto& [key, value] : back.items())
    if (original.contains(key)) value = without_new_keys(value, original.at(key));
  return back;
}

template <class Row>
std::size_t reads_back_unchanged(const Ledger::Loaded& loaded) {
  std::vector<std::string> warnings;
  const std::vector<Row> rows = loaded.read<Row>(&warnings);
  CHECK(warnings.empty());
  const std::set<std::string> environment = {"backend_describe", "isa", "cpu_isa", "placement"};
  std::size_t i = 0;
  for (const json& original : loaded.rows) {
    if (!ledger_detail::kind_matches(original, Row::kKind)) continue;
    REQUIRE(i < rows.size());
    const json back = without_new_keys(to_json(rows[i++]), original);
    for (const auto& [key, value] : original.items()) {
      INFO(Row::kKind << " row " << i << ": " << key);
      REQUIRE(back.contains(key));
      CHECK(back.at(key).dump() == value.dump());
    }
    for (const auto& [key, value] : back.items()) {
      INFO(Row::kKind << " row " << i << ": " << key << " written, not read");
      CHECK((original.contains(key) || environment.count(key) == 1));
    }
  }
  CHECK(i == rows.size());
  return rows.size();
}

// The report of `rows` (one JSON object a line), written by bench_report's own function.
std::string report_of(const std::vector<std::string>& lines, const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("trainlab-studies-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "ledger.jsonl");
    for (const auto& line : lines) out << line << "\n";
  }
  ReportOptions options;
  options.ledger_path = (dir / "ledger.jsonl").string();
  options.out_path = (dir / "REPORT.md").string();
  const std::string text = write_report(options, report_sections());
  std::filesystem::remove_all(dir);
  return text;
}

}  // namespace

TEST_CASE("the stop rule needs the target on consecutive evaluations", "[bench]") {
  const StopRule rule = accuracy_at_least(0.85, 2);
  CHECK_FALSE(rule.should_stop(evals_of({0.9})));
  CHECK_FALSE(rule.should_stop(evals_of({0.9, 0.84})));  // one lucky evaluation does not end a run
  CHECK_FALSE(rule.should_stop(evals_of({0.86, 0.84, 0.86})));
  CHECK(rule.should_stop(evals_of({0.5, 0.85, 0.86})));  // at the target counts
  CHECK(accuracy_at_least(0.85, 1).should_stop(evals_of({0.85})));
}

TEST_CASE("the loss stop rule needs the held-out loss at most the target on consecutive evaluations", "[bench]") {
  auto losses = [](std::initializer_list<double> values) {
    std::vector<EvalResult> evals;
    for (const double v : values) {
      EvalResult e;
      e.loss = v;
      evals.push_back(e);
    }
    return evals;
  };
  const StopRule rule = loss_at_most(1.2, 2);
  CHECK(rule.description == "held-out loss <= 1.2 on 2 consecutive evaluations");
  CHECK_FALSE(rule.should_stop(losses({1.1})));
  CHECK_FALSE(rule.should_stop(losses({1.1, 1.3})));
  CHECK_FALSE(rule.should_stop(losses({1.1, std::nan("")})));  // a NaN loss never reaches a target
  CHECK(rule.should_stop(losses({2.0, 1.2, 1.19})));
  CHECK_THROWS_WITH(loss_at_most(0, 2), Catch::Contains("target loss must be finite and > 0, got 0"));
}

TEST_CASE("a configuration that never reaches the target is a row that says so", "[bench]") {
  // A real run: the study's first configuration, capped at 10 steps against a target it cannot reach.
  const CostStudySpec spec = load_cost_study(std::string(TRAINLAB_SOURCE_DIR) + "/configs/cost_cpu.yaml");
  TrainConfig config = cost_configs(spec, true).front();
  config.steps = 10;
  config.reporting.eval_every = 5;
  config.data.eval_samples = 50;
  config.reporting.log_every = 1 << 30;
  config.reporting.warmup = 2;
  Trainer trainer(config, model_task(config));
  TrainCallbacks callbacks;
  callbacks.stop_rule = accuracy_at_least(0.999, 2);
  trainer.set_callbacks(callbacks);
  const TrainResult result = trainer.train(nullptr);
  CHECK(result.stopped_by == "step cap");
  REQUIRE(result.evals.size() == 2);  // step 5, and the cap itself (the study evaluates there too)
  CHECK(result.evals.back().step == 10);
  CHECK_FALSE(callbacks.stop_rule.should_stop(result.evals));

  CostConfigResult r{"capped", config.batch, config.optimizer.lr, true, "f32", {missed(result.samples_per_s)}};
  CostConfigResult ok{"fine", 64, 0.005, true, "f32", {reached(1000, 100)}};
  const CostAnalysis a = analyse_cost({r, ok}, 0.35, 0.999, 5, 10);
  REQUIRE(a.rows.size() == 2);
  CHECK(a.rows.back().name == "capped");  // never dropped: last, with its reason
  CHECK_FALSE(a.rows.back().reached_target);
  CHECK(a.rows.back().rank_cost == 0);
  CHECK(a.rows.back().why_not == "1 of 1 repeats did not reach 0.999 within 10 steps");
  CHECK(cost_table(a, true).find("not reached: 1 of 1 repeats") != std::string::npos);
}

TEST_CASE("cost ranks cover the full orderings and name the configuration throughput over-rates", "[bench]") {
  // The seed's CPU table, by hand: samples/s, steps to target at eval_every 25.
  std::vector<CostConfigResult> rows = {
      {"batch64", 64, 0.01, true, "f32", {reached(106.0, 175), reached(106.0, 200)}},
      {"batch128_linear", 128, 0.02, true, "f32", {reached(71.2, 162), reached(71.2, 163)}},
      {"batch128_unscaled", 128, 0.01, false, "f32", {reached(68.2, 137), reached(68.2, 138)}},
      {"batch256_linear", 256, 0.04, true, "f32", {reached(83.0, 137), reached(83.0, 138)}},
      {"batch128_bf16", 128, 0.02, true, "bf16", {reached(31.7, 162), reached(31.7, 163)}}};
  const CostAnalysis a = analyse_cost(rows, 0.35, 0.85, 25, 1000);
  CHECK(row_named(a, "batch64").samples_to_target == Approx(187.5 * 64));
  CHECK(row_named(a, "batch64").dollars == Approx(187.5 * 64 / 106.0 * 0.35 / 3600));
  CHECK(row_named(a, "batch256_linear").rank_throughput == 2);
  CHECK(row_named(a, "batch256_linear").rank_cost == 4);
  CHECK(row_named(a, "batch128_unscaled").rank_cost == 2);
  CHECK(a.winners_agree);          // batch64 is first in both
  CHECK_FALSE(a.orderings_agree);  // and the rungs below it move
  CHECK(a.over_rated == "batch256_linear");
  CHECK(a.over_rated_places == 2);
  CHECK(a.cheapest == "batch64");
  CHECK(a.dearest == "batch128_bf16");
  CHECK(row_named(a, "batch256_linear").quantum_samples == 25 * 256);
  CHECK(row_named(a, "batch256_linear").quantum_share == Approx(25.0 * 256 / (137.5 * 256)));
  CHECK(cost_findings(a).find("The winners agree and the orderings do not") != std::string::npos);

  SECTION("ties share a rank; equal moves name the one throughput ranks higher") {
    std::vector<CostConfigResult> tied = {{"a", 64, 0.01, true, "f32", {reached(100, 100)}},
                                          {"b", 64, 0.01, true, "f32", {reached(100, 200)}},
                                          {"c", 64, 0.01, true, "f32", {reached(50, 50)}}};
    const CostAnalysis t = analyse_cost(tied, 1.0, 0.85, 25, 1000);
    CHECK(row_named(t, "a").rank_throughput == 1);
    CHECK(row_named(t, "b").rank_throughput == 1);
    CHECK(row_named(t, "c").rank_throughput == 3);
    CHECK(row_named(t, "a").rank_cost == 1);  // 100 steps at 100/s = 50 steps at 50/s: a tie
    CHECK(row_named(t, "c").rank_cost == 1);
    CHECK(row_named(t, "b").rank_cost == 3);
    CHECK(t.over_rated == "b");
    CHECK(t.winners_agree);
  }
  SECTION("a configuration that did not finish counts below every one that did") {
    rows[0].repeats[1] = missed(106.0);  // batch64: one of two repeats missed
    const CostAnalysis m = analyse_cost(rows, 0.35, 0.85, 25, 1000);
    CHECK_FALSE(row_named(m, "batch64").reached_target);
    CHECK(row_named(m, "batch64").rank_throughput == 1);
    CHECK(m.over_rated == "batch64");
    CHECK(m.over_rated_places == 4);  // 1st by throughput, below the 4 that reached
    CHECK_FALSE(m.winners_agree);
    CHECK(m.rows.back().name == "batch64");
  }
  SECTION("when the orderings agree the findings say it is the hardware's doing") {
    std::vector<CostConfigResult> same = {{"x", 64, 0.01, true, "f32", {reached(200, 100)}},
                                          {"y", 128, 0.02, true, "f32", {reached(100, 100)}}};
    const CostAnalysis s = analyse_cost(same, 1.0, 0.85, 25, 1000);
    CHECK(s.orderings_agree);
    CHECK(s.over_rated.empty());
    CHECK(cost_findings(s).find("a property of the hardware, not of the code") != std::string::npos);
  }
  SECTION("a rate is required") {
    CHECK_THROWS_WITH(analyse_cost(rows, 0.0, 0.85, 25, 1000), Catch::Contains("rate must be > 0"));
    CHECK_THROWS_WITH(analyse_cost(rows, NAN, 0.85, 25, 1000), Catch::Contains("rate must be > 0"));
  }
}

TEST_CASE("the scaling break-even arithmetic", "[bench]") {
  std::vector<CostConfigResult> rows = {{"batch64", 64, 0.01, true, "f32", {reached(1000, 100)}},
                                        {"batch128_linear", 128, 0.02, true, "f32", {reached(1200, 60)}},
                                        {"batch128_unscaled", 128, 0.01, false, "f32", {reached(1200, 50)}}};
  const CostAnalysis a = analyse_cost(rows, 2.0, 0.85, 25, 1000);
  auto point = [](int world, std::int64_t batch, double sps) {
    ScalingPoint p;
    p.world = world;
    p.global_batch = batch;
    p.samples_per_s = summarize({sps});
    return p;
  };
  const auto b = break_even({point(1, 64, 1000), point(2, 128, 1600), point(4, 256, 3000)}, a, 2.0);
  REQUIRE(b.size() == 3);
  // World 1: 6400 samples at 1000/s = 6.4 s, one rank at $2/h.
  CHECK(b[0].hours == Approx(6.4 / 3600));
  CHECK(b[0].dollars == Approx(6.4 / 3600 * 2.0));
  CHECK(b[0].multiplier == Approx(1.0));
  // World 2: batch128 with the LR rule (never the unscaled one): 7680 samples at 1600/s = 4.8 s, two ranks.
  CHECK(b[1].config == "batch128_linear");
  CHECK(b[1].hours == Approx(4.8 / 3600));
  CHECK(b[1].dollars == Approx(4.8 / 3600 * 2.0 * 2));
  CHECK(b[1].multiplier == Approx(9.6 / 6.4));
  CHECK(b[1].saves_time);
  CHECK(b[1].dollars_per_hour_saved == Approx((b[1].dollars - b[0].dollars) / ((6.4 - 4.8) / 3600)));
  // World 4: no configuration at batch 256: said, not guessed.
  CHECK_FALSE(b[2].measured);
  CHECK(b[2].note.find("no f32 configuration at batch 256") != std::string::npos);
  CHECK(break_even_table(b, true).find("no f32 configuration at batch 256") != std::string::npos);
  // Faster and no dearer than world 1 (super-linear here): said, never a negative price per hour.
  const auto cheap = break_even({point(1, 64, 1000), point(2, 128, 2500)}, a, 2.0);
  CHECK(cheap[1].saves_time);
  CHECK(cheap[1].dollars < cheap[0].dollars);
  CHECK(cheap[1].note.find("faster and no dearer") != std::string::npos);
  INFO(break_even_table(cheap, true));
  CHECK(break_even_table(cheap, true).find("$-") == std::string::npos);
}

TEST_CASE("the break-even reads the latest bench_scaling run with weak-scaling rows", "[bench]") {
  const auto dir = std::filesystem::temp_directory_path() / ("trainlab-scaling-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "ledger.jsonl").string();
  std::filesystem::remove(path);
  const Ledger ledger(path);
  auto row = [](const std::string& run, int world, double sps, bool bind_compare) {
    return json{{"device", {{"type", "cpu"}, {"name", "test"}}},
                {"kind", "scaling"},
                {"status", "ok"},
                {"run_id", run},
                {"samples_per_s", sps},
                {"config",
                 {{"mode", "weak"},
                  {"world", world},
                  {"global_batch", 64 * world},
                  {"decode_cost", 0},
                  {"no_sync", false},
                  {"bind_compare", bind_compare}}}};
  };
  ledger.append(row("A", 1, 100, false));
  ledger.append(row("A", 2, 180, false));
  ledger.append(row("B", 1, 999, true));  // a later --bind-compare run: not a scaling table
  std::string run;
  const auto points = weak_scaling_points(path, 0, &run);
  CHECK(run == "A");
  REQUIRE(points.size() == 2);
  CHECK(points[1].samples_per_s.median == 180);
  CHECK_THROWS_WITH(weak_scaling_points(path, 60, &run), Catch::Contains("no weak-scaling rows at decode cost 60"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("markdown cells cannot break their table", "[bench]") {
  const std::string table = render_table({"a", "b"}, {{"x | y", "line\nbreak"}}, true);
  CHECK(table.find("x \\| y") != std::string::npos);
  CHECK(table.find("line break") != std::string::npos);
}

TEST_CASE("the cost study file is checked by name", "[bench]") {
  const std::string good = "study: s\ndevice: cpu\nbase: {batch: 64, lr: 0.01}\nconfigs:\n  - name: a\n";
  CHECK(load_cost_study_text(good, "t.yaml").configs.size() == 1);
  CHECK_THROWS_WITH(load_cost_study_text(good + "colour: red\n", "t.yaml"), Catch::Contains("unknown key 'colour'"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "target: 1.5\n", "t.yaml"),
                    Catch::Contains("target 1.5 is not a held-out accuracy to reach (allowed: (0, 1])"));
  // A loss study: its target in nats, any finite number > 0.
  const CostStudySpec loss = load_cost_study_text(good + "metric: loss\ntarget: 2.2\n", "t.yaml");
  CHECK(loss.metric == CostMetric::loss);
  CHECK(target_phrase(loss.metric, loss.target) == "held-out loss <= 2.2");
  CHECK_THROWS_WITH(load_cost_study_text(good + "metric: loss\ntarget: -1\n", "t.yaml"),
                    Catch::Contains("target -1 is not a held-out loss to reach"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "metric: bleu\n", "t.yaml"),
                    Catch::Contains("metric 'bleu' is not one of accuracy"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "  - name: a\n", "t.yaml"), Catch::Contains("'a' appears twice"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "  - name: b\n    lr: doubled\n", "t.yaml"),
                    Catch::Contains("lr must be 'rule'"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "  - name: b\n    set: {batchsize: 3}\n", "t.yaml"),
                    Catch::Contains("batchsize"));
  CHECK_THROWS_WITH(load_cost_study_text(good + "  - name: b\n    set: {lr: 0.1}\n", "t.yaml"),
                    Catch::Contains("sets lr directly"));
  std::string tpu = good;
  tpu.replace(tpu.find("device: cpu"), 11, "device: tpu");
  CHECK_THROWS_WITH(load_cost_study_text(tpu, "t.yaml"), Catch::Contains("device must be cpu or cuda, got 'tpu'"));
}

TEST_CASE("a study file's data: key points every configuration at a data set and drops decode_cost", "[bench]") {
  const std::string cost =
      "study: s\ndevice: cpu\ndata: /some/set\nbase: {batch: 64, lr: 0.01, decode_cost: 60}\n"
      "configs:\n  - name: a\n  - name: b\n    set: {batch: 128}\n";
  const CostStudySpec spec = load_cost_study_text(cost, "t.yaml");
  CHECK(spec.data == "/some/set");
  for (const auto& c : cost_configs(spec, false)) {
    CHECK(c.data.dir == "/some/set");
    CHECK(c.data.decode_cost == 0);  // the decoding is real now
  }
  // Without the key: SyntheticImages with the file's decode_cost.
  std::string synthetic = cost;
  synthetic.erase(synthetic.find("data: /some/set\n"), 16);
  CHECK(cost_configs(load_cost_study_text(synthetic, "t.yaml"), false)[0].data.decode_cost == 60);
  // The ladder's file: the same key, every rung on the data set.
  const std::string ladder =
      "ladder: t\ndevice: cpu\ndata: /some/set\nbase: {batch: 32, decode_cost: 60}\nrungs:\n"
      "  - name: baseline\n  - name: workers\n    set: {workers: 2}\n";
  for (const auto& c : rung_configs(load_ladder_text(ladder, "l.yaml"))) {
    CHECK(c.data.dir == "/some/set");
    CHECK(c.data.decode_cost == 0);
  }
  // What a row records: SyntheticImages by name, a directory that is not a data set refused by name.
  CHECK(data_source_of(DataConfig{}).label() == "SyntheticImages");
  CHECK_THROWS_WITH(data_source_of_dir("/nonexistent-trainlab-set"), Catch::Contains("/nonexistent-trainlab-set"));
}

TEST_CASE("a token model's studies drop the decode stand-in, skip the loader's rungs and name SyntheticTokens",
          "[bench]") {
  ModelConfig gpt;
  gpt.name = "gpt";
  CHECK(data_source_of(DataConfig{}, gpt).label() == "SyntheticTokens");
  KnobMap base = {{"batch", "32"}, {"decode_cost", "60"}};
  use_model(base, gpt);
  CHECK(base.count("decode_cost") == 0);
  ModelConfig smallcnn;
  KnobMap images = {{"decode_cost", "60"}};
  use_model(images, smallcnn);
  CHECK(images.at("decode_cost") == "60");
  // The loader's rungs do not apply (nothing is decoded); the compute rungs do.
  Rung workers;
  workers.name = "workers";
  workers.set = {{"workers", "2"}};
  CHECK_THAT(rung_model_skip_reason(workers, gpt), Catch::Contains("nothing to decode"));
  CHECK(rung_model_skip_reason(workers, smallcnn).empty());
  Rung compile;
  compile.name = "compile";
  compile.set = {{"fuse", "true"}};
  CHECK(rung_model_skip_reason(compile, gpt).empty());
  // And a config that asks a token model for decode work is refused, by name.
  TrainConfig config;
  config.model = gpt;
  config.data.decode_cost = 60;
  CHECK_THROWS_WITH(model_task(config), Catch::Contains("decode_cost 60 is SyntheticImages' stand-in") &&
                                            Catch::Contains("drop decode_cost"));
}

TEST_CASE("the Fashion-MNIST cost study runs the SyntheticImages study's configurations on the real data", "[bench]") {
  const CostStudySpec synthetic = load_cost_study(std::string(TRAINLAB_SOURCE_DIR) + "/configs/cost_cpu.yaml");
  const CostStudySpec fashion = load_cost_study(std::string(TRAINLAB_SOURCE_DIR) + "/configs/cost_fashion.yaml");
  CHECK(synthetic.data.empty());
  CHECK(fashion.data == "build/fashion-mnist");
  const auto a = cost_configs(synthetic, false), b = cost_configs(fashion, false);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(synthetic.configs[i].name == fashion.configs[i].name);
    CHECK(a[i].batch == b[i].batch);
    CHECK(a[i].optimizer.lr == b[i].optimizer.lr);
    CHECK(a[i].execution.dtype == b[i].execution.dtype);
    CHECK(b[i].data.dir == "build/fashion-mnist");
  }
  CHECK(fashion.step_cap == synthetic.step_cap);
  CHECK(fashion.eval_every == synthetic.eval_every);
}

TEST_CASE("the chart module draws a matrix of counts with each cell's count and its row share", "[bench]") {
  chart::Heatmap map;
  map.row_labels = map.column_labels = {"shirt", "coat"};
  map.values = {{30, 10}, {0, 40}};
  const std::string svg = chart::render(chart::Figure{"confusion", {map}, {}});
  CHECK(svg.find(">30</text>") != std::string::npos);
  CHECK(svg.find(">40</text>") != std::string::npos);
  CHECK(svg.find(">0</text>") == std::string::npos);                         // an empty cell prints nothing
  CHECK(svg.find(R"(fill="#3a7ca5" opacity="0.75")") != std::string::npos);  // 30 of the row's 40
  CHECK(svg.find(R"(fill="#d1495b" opacity="0.25")") != std::string::npos);  // the confusion, 10 of 40
  CHECK(svg.find(">shirt</text>") != std::string::npos);
}

TEST_CASE("the MPI variant a process runs under is read as Open MPI and glibc read it", "[bench]") {
  // The environment is restored however the test ends.
  struct Restore {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    explicit Restore(std::initializer_list<const char*> names) {
      for (const char* n : names) {
        const char* v = std::getenv(n);
        saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      }
    }
    ~Restore() {
      for (const auto& [n, v] : saved) v ? setenv(n.c_str(), v->c_str(), 1) : unsetenv(n.c_str());
    }
  } restore{"OMPI_MCA_coll_tuned_use_dynamic_rules", "OMPI_MCA_coll_tuned_allreduce_algorithm", "GLIBC_TUNABLES"};
  unsetenv("OMPI_MCA_coll_tuned_use_dynamic_rules");
  unsetenv("OMPI_MCA_coll_tuned_allreduce_algorithm");
  unsetenv("GLIBC_TUNABLES");
  CHECK(mpi_variant_of_environment().algorithm == "decision");
  CHECK(mpi_variant_of_environment().malloc == "default");
  setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", "4", 1);
  CHECK(mpi_variant_of_environment().algorithm == "decision");  // ignored by Open MPI without the dynamic rules
  setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 1);
  CHECK(mpi_variant_of_environment().algorithm == "ring");
  setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", "6", 1);
  CHECK(mpi_variant_of_environment().algorithm == "rabenseifner");
  setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295", 1);
  CHECK(mpi_variant_of_environment().malloc == "tuned");
  for (const char* bad : {"7", "-1", "4x", "ring"}) {
    setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", bad, 1);
    CHECK_THROWS_WITH(mpi_variant_of_environment(),
                      Catch::Contains(std::string("OMPI_MCA_coll_tuned_allreduce_algorithm=") + bad));
  }
}

TEST_CASE("cost configs follow the declared LR rule", "[bench]") {
  const CostStudySpec spec = load_cost_study(std::string(TRAINLAB_SOURCE_DIR) + "/configs/cost_cpu.yaml");
  const auto configs = cost_configs(spec, false);
  REQUIRE(spec.configs.size() == 5);
  const double base_lr = configs[0].optimizer.lr;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const double expected = spec.configs[i].lr_follows_rule ? base_lr * static_cast<double>(configs[i].batch) /
                                                                  static_cast<double>(configs[0].batch)
                                                            : base_lr;
    CHECK(configs[i].optimizer.lr == Approx(expected));
    CHECK(configs[i].reporting.eval_every == spec.eval_every);
    CHECK(configs[i].reporting.eval_at_end);  // the cap is evaluated too
    CHECK(configs[i].steps == spec.step_cap);
  }
  CHECK(configs[2].batch == 128);
  CHECK(configs[2].optimizer.lr == Approx(base_lr));  // batch128_unscaled
  CHECK(cost_configs(spec, true)[0].steps == spec.quick_step_cap);
  // The GPU file: the same configurations, the device taken from it (never from the code).
  const CostStudySpec gpu = load_cost_study(std::string(TRAINLAB_SOURCE_DIR) + "/configs/cost_cuda.yaml");
  CHECK(gpu.device == "cuda");
  REQUIRE(gpu.configs.size() == spec.configs.size());
  for (const auto& c : cost_configs(gpu, false)) CHECK(c.execution.backend == "cuda");
}

TEST_CASE("cpu lists and affinity are applied and read back", "[bench]") {
  CHECK(cpu_list({0, 1, 2, 3, 8}) == "0-3,8");
  CHECK(parse_cpu_list("0-3,8") == CpuSet{0, 1, 2, 3, 8});
  CHECK(parse_cpu_list(cpu_list({1, 3, 4, 5})) == CpuSet{1, 3, 4, 5});
  CHECK_THROWS_WITH(parse_cpu_list("3-1"), Catch::Contains("'3-1'"));
  CHECK_THROWS_WITH(parse_cpu_list("a"), Catch::Contains("'a'"));
  CHECK_THROWS_WITH(parse_cpu_list("1,,2"), Catch::Contains("'1,,2'"));

  const Topology topology = machine_topology();
  REQUIRE(topology.physical_cores() >= 1);
  const auto [a, b] = topology.halves();
  CHECK_FALSE(a.empty());
  CHECK_FALSE(b.empty());
  if (topology.physical_cores() >= 2) {
    std::vector<int> both;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    CHECK(both.empty());  // the halves are disjoint
  }

  // A thread confines itself; the process's view of it (from /proc/self/task) agrees.
  const CpuSet one = {topology.all().back()};
  int tid = 0;
  CpuSet seen;
  std::mutex m;
  std::thread t([&] {
    set_thread_affinity(0, one);
    std::lock_guard lock(m);
    tid = current_tid();
    for (const auto& th : process_threads())
      if (th.tid == tid) seen = th.cpus;
  });
  t.join();
  CHECK(seen == one);
  CHECK(thread_affinity(0) != CpuSet{});
}

TEST_CASE("a loader's worker hook runs on each worker and confines it", "[bench]") {
  auto data = std::make_shared<SyntheticImages>(1, Split::train, 64, 0);
  DataLoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 2;
  o.persistent_workers = true;
  const CpuSet one = {machine_topology().all().front()};
  std::mutex m;
  std::set<int> workers;
  std::vector<CpuSet> masks;
  o.worker_init = [&](int w) {
    set_thread_affinity(0, one);
    std::lock_guard lock(m);
    workers.insert(w);
    masks.push_back(thread_affinity(0));
  };
  Backend& backend = get_backend("reference");
  DataLoader loader(data, o, backend);
  for (int i = 0; i < 4; ++i) loader.next();
  // Both workers have started (the second may not have made a batch yet).
  for (int wait = 0; wait < 500; ++wait) {
    {
      std::lock_guard lock(m);
      if (workers.size() == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(m);
    CHECK(workers == std::set<int>{0, 1});
    for (const auto& mask : masks) CHECK(mask == one);
  }
  // A hook that throws: the batch it would have made raises its error on the consuming thread.
  loader.set_worker_init([](int) { throw Error("no such core"); });
  CHECK_THROWS_WITH(loader.next(), Catch::Contains("worker_init: no such core"));
}

TEST_CASE("the pinning verdicts: NO CONCLUSION unless the calibration arms overlap", "[bench]") {
  auto arm = [](const std::string& name, std::vector<double> values) {
    PinningArm a;
    a.name = name;
    a.samples_per_s = std::move(values);
    return a;
  };
  SECTION("overlapping calibration arms: verdicts are issued") {
    const auto a = analyse_pinning(
        "quiet",
        {arm("default", {100, 104, 98}), arm("default_b", {101, 99, 103}), arm("threads_capped", {100, 102, 97}),
         arm("pinned_split", {140, 150, 145}), arm("pinned_half_shared", {138, 146, 142})},
        false);
    CHECK(a.separability_test_valid);
    CHECK(a.calibration.noise_floor_percent == Approx(1.0 / 100.5 * 100));
    CHECK(a.effects[1].verdict == Verdict::separable);  // pinned_split vs default
    CHECK(a.confinement.verdict == Verdict::separable);
    CHECK(a.disjointness.verdict == Verdict::not_separable);
    CHECK(a.confinement.floor_multiple == Approx(a.confinement.percent / a.calibration.noise_floor_percent));
    const std::string text = pinning_findings(a);
    CHECK(text.find("separability_test_valid: true") != std::string::npos);
    CHECK(text.find("confinement (pinned_half_shared vs default): +42.0%") != std::string::npos);
    CHECK(text.find("disjointness (pinned_split vs pinned_half_shared)") != std::string::npos);
    CHECK(text.find("not established") != std::string::npos);
    CHECK(text.find("NO CONCLUSION") == std::string::npos);
  }
  SECTION("identical arms that do not overlap: NO CONCLUSION, whatever the other arms do") {
    const auto a = analyse_pinning(
        "contended",
        {arm("default", {48.9, 60, 67.0}), arm("default_b", {81.9, 90, 92.5}), arm("threads_capped", {80, 85, 90}),
         arm("pinned_split", {140, 150, 145}), arm("pinned_half_shared", {138, 146, 142})},
        false);
    CHECK_FALSE(a.separability_test_valid);
    for (const auto& e : a.effects) CHECK(e.verdict == Verdict::no_conclusion);
    const std::string text = pinning_findings(a);
    CHECK(text.find("separability_test_valid: false") != std::string::npos);
    CHECK(text.find("NO CONCLUSION") != std::string::npos);
    CHECK(text.find("an effect, clear of the floor") == std::string::npos);
  }
  SECTION("where threads_capped equals default, its gaps are calibration pairs too") {
    const auto a = analyse_pinning(
        "quiet",
        {arm("default", {100, 101, 99}), arm("default_b", {100, 102, 98}), arm("threads_capped", {110, 112, 111}),
         arm("pinned_split", {140, 150, 145}), arm("pinned_half_shared", {138, 146, 142})},
        true);
    CHECK_FALSE(a.separability_test_valid);  // threads_capped does not overlap default: the test is unsound
    CHECK(a.calibration_pair.find("threads_capped") != std::string::npos);
  }
  SECTION("one repeat: never a verdict") {
    const auto a = analyse_pinning("quiet",
                                   {arm("default", {100}), arm("default_b", {100}), arm("threads_capped", {100}),
                                    arm("pinned_split", {150}), arm("pinned_half_shared", {140})},
                                   false);
    CHECK_FALSE(a.separability_test_valid);
  }
  SECTION("a missing arm is named") {
    CHECK_THROWS_WITH(analyse_pinning("quiet", {arm("default", {1, 2})}, false), Catch::Contains("'default_b'"));
  }
}

TEST_CASE(
    "the seed studies' rows: the committed ledger reads into their structs, writes back unchanged and "
    "regenerates its report",
    "[bench]") {
  // The schema, not the count: every row of each kind reads into its struct and writes back the
  // JSON it came from (reads_back_unchanged), whatever runs the ledger holds; each kind is there.
  const Ledger::Loaded& loaded = committed_ledger();
  CHECK(loaded.warnings.empty());
  CHECK(reads_back_unchanged<PinningRepeatRow>(loaded) > 0);
  CHECK(reads_back_unchanged<MemoryRepeatRow>(loaded) > 0);
  CHECK(reads_back_unchanged<DatasetRepeatRow>(loaded) > 0);
  CHECK(reads_back_unchanged<CompareTorchRow>(loaded) > 0);
  CHECK(reads_back_unchanged<CompareTorchPeerRow>(loaded) > 0);
  // The report regenerates from the rows alone, skipping none, with every section the committed
  // REPORT.md has (its headings, in order).
  const std::string dir = std::string(TRAINLAB_SOURCE_DIR) + "/bench/results/amd_epyc/";
  const std::vector<std::string> lines = committed_lines();
  auto headings = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("## ", 0) == 0) out.push_back(line);
    return out;
  };
  const std::string regenerated = report_of(lines, "committed");
  CHECK(regenerated.find("- ledger warning: ") == std::string::npos);
  std::ifstream committed_in(dir + "REPORT.md");
  const std::string committed((std::istreambuf_iterator<char>(committed_in)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(headings(committed).empty());
  CHECK(headings(regenerated) == headings(committed));
  // A child's report is read back the same way (its read-back masks null until every worker exists).
  PinningChildReport child;
  child.samples_per_s = 1234.5;
  child.threads = 2;
  child.step_seconds = {0.01, 0.02};
  const json quiet = to_json(child);
  CHECK(quiet.at("readback").is_null());
  child.readback = PinningReadBack{"0-1", "1", "", 1};
  const PinningChildReport back = from_json<PinningChildReport>(to_json(child));
  REQUIRE(back.readback);
  CHECK(back.readback->workers == "1");
  CHECK(back.step_seconds == child.step_seconds);
}

TEST_CASE("the seed studies' sections: a row with a wrong type is skipped with its line, never an aborted report",
          "[bench]") {
  // Each kind's committed rows, then a copy of its last row with a field its section reads damaged:
  // the report is the one without the copy, and says which line it skipped and why.
  struct Damage {
    const char* kind;
    const char* pointer;
    json value;
    const char* heading;
    const char* said;
  };
  const std::vector<Damage> damages = {
      {"pinning_repeat", "/samples_per_s", "fast", "## CPU pinning", "samples_per_s is \"fast\", not a number"},
      {"memory_repeat", "/memory_per_rank/total_peak_bytes", 1.5, "## Memory: batch x recompute x ZeRO",
       "memory_per_rank/total_peak_bytes is 1.5, not an integer"},
      {"dataset_study_repeat", "/loader_samples_per_s", json::array(), "## Data on disk: the re-export regression",
       "loader_samples_per_s is [], not a number"},
      {"compare_torch", "/peer_samples_per_s/median", nullptr, "## Against PyTorch",
       "peer_samples_per_s/median is null, not a number"},
  };
  for (const Damage& d : damages) {
    INFO(d.kind);
    std::vector<std::string> lines;
    json last;
    for (const json& row : committed_ledger().rows) {
      if (!ledger_detail::kind_matches(row, d.kind)) continue;
      lines.push_back(row.dump());
      last = row;
    }
    REQUIRE(!lines.empty());
    const std::string clean = report_of(lines, "clean");
    last[json::json_pointer(d.pointer)] = d.value;
    lines.push_back(last.dump());
    std::string damaged;
    REQUIRE_NOTHROW(damaged = report_of(lines, "damaged"));
    CHECK_THAT(damaged, Catch::Contains("line " + std::to_string(lines.size()) + " skipped: " + d.said));
    const auto sections = [](const std::string& md) { return md.substr(md.find("\n## ")); };
    CHECK_THAT(sections(damaged), Catch::StartsWith(std::string("\n") + d.heading));
    CHECK(sections(damaged) == sections(clean));
  }
}
