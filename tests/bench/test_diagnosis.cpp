// Seed 002's diagnosis tools (bench/diagnosis.h, bench/run_record.h): the budget arithmetic, the
// per-rank step statistics, checkpoint inspection, and diagnose on prepared runs whose cause is
// known: a hung run, a dead one, a starved one, a straggler, an incomplete checkpoint.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "bench/measure/diagnosis.h"
#include "bench/measure/ledger.h"
#include "bench/measure/run_record.h"
#include "engine/train/checkpoint.h"
#include "engine/train/resume.h"
#include "engine/train/trainer.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::bench;
using trainlab::test::TempDir;

namespace {

std::string host() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof buffer - 1);
  return buffer;
}

json row(const std::string& run, const char* kind, double unix_time) {
  return {
      {"device", {{"name", "test cpu"}, {"type", "cpu"}}}, {"run_id", run}, {"kind", kind},          {"host", host()},
      {"pid", static_cast<std::int64_t>(::getpid())},      {"cores", 2},    {"unix_time", unix_time}};
}

json config_with(std::initializer_list<std::pair<const char*, const char*>> keys) {
  json c = {{"workers", "2"}, {"data", ""}, {"save", ""}, {"trace", ""}, {"batch", "32"}};
  for (const auto& [k, v] : keys) c[k] = v;
  return c;
}

// A finished run: `steps` steps of 10 ms with `wait` seconds of data wait each, and `ranks`.
json finished(const std::string& run, double t, const std::vector<double>& wait, const json& ranks,
              const json& config) {
  json r = row(run, "train_run", t);
  r["status"] = "ok";
  r["config"] = config;
  r["first_step"] = 0;
  r["last_step"] = static_cast<std::int64_t>(wait.size());
  r["step_seconds"] = std::vector<double>(wait.size(), 0.010);
  r["data_wait_seconds"] = wait;
  double total_wait = 0;
  for (double w : wait) total_wait += w;
  const double n = static_cast<double>(wait.size());
  r["phases"] = {{"data_wait_s", total_wait},
                 {"forward_s", 0.003 * n},
                 {"backward_s", 0.006 * n - total_wait},
                 {"optimizer_s", 0.001 * n},
                 {"comm_s", 0.0}};
  r["ranks"] = ranks;
  return r;
}

json rank(int r, double work_ms) {
  return {{"rank", r}, {"steps", 50}, {"p50_ms", 12.0}, {"p99_ms", 15.0}, {"max_ms", 16.0}, {"work_p50_ms", work_ms}};
}

}  // namespace

TEST_CASE("throughput budget: seed 002's arithmetic", "[diagnose]") {
  CHECK(straggler_tail(0.01, 64) == Approx(0.4744).margin(1e-4));
  CHECK(straggler_tail(0.01, 128) == Approx(0.7237).margin(1e-4));
  CHECK(straggler_tail(0.0, 1000) == 0.0);
  const Budget b = throughput_budget({128, 95, 6800, 0.01});
  CHECK(b.demanded == Approx(12160));
  CHECK(b.utilisation == Approx(6800.0 / 12160.0));
  CHECK(b.ranks_fed == Approx(6800.0 / 95.0));
  CHECK(b.tail == Approx(straggler_tail(0.01, 128)));
  CHECK(b.tail_double == Approx(straggler_tail(0.01, 256)));
  CHECK(throughput_budget({64, 95, 6800, 0.01}).utilisation == 1.0);  // the loader has headroom
  const std::string seed = seed_budget_text();
  CHECK(seed.find("55.9%") != std::string::npos);
  CHECK(seed.find("47.4% -> 72.4%") != std::string::npos);
  CHECK(seed.find("10968") != std::string::npos);  // the demand at which the seed's 62% would follow
  REQUIRE_THROWS_CONTAINING(throughput_budget({0, 95, 6800, 0.01}), "--ranks 0");
  REQUIRE_THROWS_CONTAINING(throughput_budget({8, 95, 6800, 1.5}), "--p-slow 1.5");
}

TEST_CASE("per-rank step statistics: percentiles and the slowest rank", "[diagnose]") {
  std::vector<double> steps;
  for (int i = 1; i <= 100; ++i) steps.push_back(i * 1e-3);
  CHECK(percentile(steps, 0.5) == Approx(0.050));
  CHECK(percentile(steps, 0.99) == Approx(0.099));
  CHECK(percentile({}, 0.5) == 0);
  const RankStepStats s = rank_step_stats(3, steps, steps);
  CHECK(s.rank == 3);
  CHECK(s.max_ms == Approx(100));
  CHECK(s.p99_ms == Approx(99));
  const Straggler slow = slowest_rank({{0, 10, 12, 13, 10, 5}, {1, 10, 12, 13, 10.2, 5}, {2, 14, 16, 18, 14, 5}});
  CHECK(slow.rank == 2);
  CHECK(slow.excess_percent == Approx((14 / 10.2 - 1) * 100));
}

TEST_CASE("inspect: a trainlab checkpoint is complete; one without schedule and loader state is not", "[diagnose]") {
  TempDir tmp("inspect");
  TrainConfig config;
  config.steps = 6;
  config.batch = 8;
  config.data.train_samples = 40;
  config.reporting.eval_at_end = false;
  config.optimizer.schedule = ScheduleKind::warmup_cosine;
  config.optimizer.warmup_steps = 4;
  config.checkpoint.save = tmp / "ck";
  config.reporting.log_every = 100;
  Trainer(config).train(nullptr);
  const CheckpointInspection r = inspect_checkpoint(tmp / "ck");
  CHECK(r.complete());
  CHECK(r.step == 6);
  CHECK(r.samples_drawn == 48);              // 6 steps of 8
  CHECK(r.visited_fraction == Approx(1.0));  // 5 batches per epoch: the second epoch has begun
  // warmup_cosine at step 6 of 6: the schedule's end, min_lr 0.
  CHECK(r.resume_lr == Approx(0.0).margin(1e-12));
  CHECK(r.config.at("batch") == "8");
  // What a trainer that saves only weights and moments would leave.
  Checkpoint c = load_checkpoint(tmp / "ck", trainlab::test::ref());
  c.scheduler = {};
  c.loader = {};
  save_checkpoint(tmp / "partial", c);
  const CheckpointInspection partial = inspect_checkpoint(tmp / "partial");
  CHECK_FALSE(partial.complete());
  const std::string text = inspection_text(partial);
  CHECK(text.find("scheduler        MISSING") != std::string::npos);
  CHECK(text.find("loader position  MISSING") != std::string::npos);
  CHECK(text.find("INCOMPLETE") != std::string::npos);
}

TEST_CASE("one validation: what --resume refuses, verify and inspect refuse with its words (issue 30 #17)",
          "[diagnose]") {
  TempDir tmp("one-validation");
  TrainConfig config;
  config.steps = 4;
  config.batch = 8;
  config.data.train_samples = 40;
  config.optimizer.kind = OptimizerKind::adamw;
  config.reporting.eval_at_end = false;
  config.reporting.log_every = 100;
  config.checkpoint.save = tmp / "ck";
  Trainer(config).train(nullptr);
  const Checkpoint good = load_checkpoint(tmp / "ck", trainlab::test::ref());
  validate_checkpoint(good, tmp / "ck");
  CHECK(inspect_checkpoint(tmp / "ck").complete());
  const std::string moment = good.optimizer.tensors.begin()->first;  // "exp_avg.conv1.bias"
  struct Damage {
    const char* what;
    std::function<void(Checkpoint&)> apply;
    const char* words;  // in every refusal
  };
  const std::vector<Damage> damages = {
      {"NaN in a moment",
       [&](Checkpoint& c) {
         Tensor& t = c.optimizer.tensors.at(moment);
         std::vector<float> v = t.to_vector<float>();
         v[0] = std::nanf("");
         t = Tensor::from_vector(v, t.shape(), t.backend());
       },
       "holds nan"},
      {"a moment removed", [&](Checkpoint& c) { c.optimizer.tensors.erase(moment); },
       "has only one of its two moments"},
      {"a moment renamed",
       [&](Checkpoint& c) {
         c.optimizer.tensors["exp_avg.conv9.bias"] = c.optimizer.tensors.at(moment);
         c.optimizer.tensors.erase(moment);
       },
       "exp_avg"},
      {"an extra tensor", [&](Checkpoint& c) { c.optimizer.tensors["extra.thing"] = c.optimizer.tensors.at(moment); },
       "'extra.thing' that is none of its buffers"},
      {"epoch -1", [](Checkpoint& c) { c.loader.integers["epoch"] = -1; }, "epoch -1 is negative"},
      {"dataset_size 0", [](Checkpoint& c) { c.loader.integers["dataset_size"] = 0; }, "dataset_size 0"},
      {"batch -8", [](Checkpoint& c) { c.loader.integers["batch_size"] = -8; }, "batch_size -8"},
      {"step -5", [](Checkpoint& c) { c.trainer.integers["step"] = -5; }, "step -5"},
      {"step 3 of 4 done", [](Checkpoint& c) { c.trainer.integers["step"] = 3; }, "inconsistent"},
  };
  for (const Damage& damage : damages) {
    INFO(damage.what);
    Checkpoint bad = good;
    damage.apply(bad);
    const std::string dir = tmp / "bad";
    save_checkpoint(dir, bad);
    TrainConfig again = config;
    again.checkpoint.save.clear();
    again.checkpoint.resume = dir;
    REQUIRE_THROWS_CONTAINING(Trainer(again), damage.words);
    REQUIRE_THROWS_CONTAINING(validate_checkpoint(load_checkpoint(dir, trainlab::test::ref()), dir), damage.words);
    const CheckpointInspection r = inspect_checkpoint(dir);
    CHECK_FALSE(r.complete());
    CHECK(r.refused.find(damage.words) != std::string::npos);
    CHECK(inspection_text(r).find("REFUSED") != std::string::npos);
  }
}

TEST_CASE("diagnose names the cause of prepared runs, in the seed's order", "[diagnose]") {
  TempDir tmp("diagnose");
  const std::string ledger_path = tmp / "ledger.jsonl";
  const Ledger ledger(ledger_path);
  const double now = 2'000'000'000.0;
  DiagnoseOptions o;
  o.ledger = ledger_path;
  o.now = now;

  SECTION("a hung run: the step counter stopped and the process is still there") {
    for (int i = 0; i < 5; ++i) {
      json p = row("hung", "train_progress", now - 600 + i);
      p["step"] = (i + 1) * 20;
      p["steps"] = 300;
      p["status"] = "running";
      if (i == 0) p["config"] = config_with({});
      ledger.append(p);
    }
    o.target = "hung";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 1);
    CHECK(d.cause.find("HUNG at step 100") != std::string::npos);
  }
  SECTION("a run that died: no progress, no process, no summary row") {
    json p = row("dead", "train_progress", now - 300);
    p["step"] = 40;
    p["pid"] = 999999999;  // no such process
    ledger.append(p);
    json q = p;
    q["unix_time"] = now - 299;
    q["step"] = 60;
    ledger.append(q);
    o.target = "dead";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 1);
    CHECK(d.cause.find("DIED at step 60") != std::string::npos);
  }
  SECTION("a slow run still advancing is not hung") {
    json p = row("slow", "train_progress", now - 20);
    p["step"] = 20;
    ledger.append(p);
    p["unix_time"] = now - 10;
    p["step"] = 40;
    ledger.append(p);
    o.target = "slow";
    CHECK(diagnose(o).checks[0].verdict == CheckVerdict::ok);
  }
  SECTION("a starved run: a sawtooth of data waits") {
    std::vector<double> wait;
    for (int i = 0; i < 60; ++i) wait.push_back(i % 3 == 0 ? 0.007 : 0.0002);  // every third step waits 70%
    ledger.append(finished("starved", now, wait, json::array({rank(0, 8)}), config_with({})));
    o.target = "starved";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 2);
    CHECK(d.cause.find("sawtooth") != std::string::npos);
    CHECK(d.checks[4].verdict == CheckVerdict::problem);  // the loader check explains it
  }
  SECTION("a straggler: one rank's work is slower, the step waits for it") {
    ledger.append(finished("straggler", now, std::vector<double>(50, 0.0001),
                           json::array({rank(0, 10), rank(1, 10.3), rank(2, 14.5), rank(3, 9.9)}), config_with({})));
    o.target = "straggler";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 4);
    CHECK(d.cause.find("rank 2") != std::string::npos);
  }
  SECTION("an incomplete checkpoint") {
    TrainConfig config;
    config.steps = 3;
    config.batch = 8;
    config.data.train_samples = 40;
    config.reporting.eval_at_end = false;
    config.checkpoint.save = tmp / "ck";
    Trainer(config).train(nullptr);
    Checkpoint c = load_checkpoint(tmp / "ck", trainlab::test::ref());
    c.scheduler = {};
    save_checkpoint(tmp / "ck", c);
    ledger.append(finished("restarts", now, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}),
                           config_with({{"save", (tmp / "ck").c_str()}})));
    o.target = "restarts";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 8);
    CHECK(d.cause.find("INCOMPLETE") != std::string::npos);
    CHECK(d.cause.find("scheduler") != std::string::npos);
    // The checkpoint alone says the same.
    o.target = tmp / "ck";
    CHECK(diagnose(o).decided_by == 8);
  }
  SECTION("a relative path in an older record is not resolved here (issue 30 #20)") {
    // Another run's checkpoint under the same relative name in this directory is not this run's.
    ledger.append(finished("relative", now, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}),
                           config_with({{"save", "ck"}, {"trace", "t.json"}})));
    o.target = "relative";
    const Diagnosis d = diagnose(o);
    CHECK(d.checks[7].verdict == CheckVerdict::not_applicable);
    bool warned = false;
    for (const auto& w : d.warnings) warned = warned || w.find("relative path 'ck'") != std::string::npos;
    CHECK(warned);
  }
  SECTION("a run recorder writes its paths absolute") {
    TrainConfig config;
    config.steps = 2;
    config.batch = 8;
    config.data.train_samples = 16;
    config.reporting.eval_at_end = false;
    config.reporting.log_every = 1;
    config.checkpoint.save = "relative-ck";
    RunRecorder recorder(ledger_path, config, 0, 1);
    StepReport step;
    step.step = 1;
    recorder.on_step(step);
    const auto rows = Ledger(ledger_path).load().read<TrainProgressRow>(nullptr);
    REQUIRE_FALSE(rows.empty());
    REQUIRE(rows.back().config);
    CHECK(rows.back().config->at("save") ==
          (std::filesystem::current_path() / "relative-ck").lexically_normal().string());
  }
  SECTION("a healthy run, and the comparison with an earlier one") {
    ledger.append(
        finished("before", now - 100, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}), config_with({})));
    ledger.append(finished("after", now, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}),
                           config_with({{"batch", "64"}})));
    o.target = "before";
    const Diagnosis healthy = diagnose(o);
    CHECK(healthy.decided_by == 0);
    for (const auto& c : healthy.checks) CHECK(c.verdict != CheckVerdict::problem);
    o.target = "after";
    o.against = "before";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 7);
    CHECK(d.checks[6].evidence.find("batch: 32 -> 64") != std::string::npos);
  }
  SECTION("not starved, but the step's compute slowed against the earlier run: cores taken by the loader") {
    json before =
        finished("fast", now - 100, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}), config_with({}));
    before["measured_steps"] = 50;
    json after = finished("slow", now, std::vector<double>(50, 0.0001), json::array({rank(0, 8)}),
                          config_with({{"data", "elsewhere"}}));
    after["measured_steps"] = 50;
    after["phases"]["backward_s"] = after["phases"]["backward_s"].get<double>() * 2;  // compute +60%
    ledger.append(before);
    ledger.append(after);
    o.target = "slow";
    o.against = "fast";
    const Diagnosis d = diagnose(o);
    CHECK(d.decided_by == 3);
    CHECK(d.cause.find("slower than the earlier run") != std::string::npos);
    CHECK(d.checks[4].finding.find("decode on the same 2 cores") != std::string::npos);
  }
  SECTION("a row of the run with a field of the wrong type is skipped with its line, not read into a check") {
    for (int i = 0; i < 5; ++i) {
      json p = row("typed", "train_progress", now - 600 + i);
      p["step"] = (i + 1) * 20;
      p["steps"] = 300;
      p["status"] = "running";
      if (i == 4) p["step"] = "eighty";  // the last progress row, damaged
      ledger.append(p);
    }
    json bad_run = row("typed", "train_run", now);
    bad_run["status"] = "ok";
    bad_run["phases"] = "fast";  // a summary row whose phases are not an object
    ledger.append(bad_run);
    o.target = "typed";
    const Diagnosis d = diagnose(o);
    REQUIRE(d.warnings.size() == 2);
    CHECK_THAT(d.warnings[0], Catch::Contains("line 6 skipped: phases is \"fast\", not an object"));
    CHECK_THAT(d.warnings[1], Catch::Contains("line 5 skipped: step is \"eighty\", not an integer"));
    // Without the damaged rows the run reads as the four good progress rows: hung at step 80.
    CHECK(d.decided_by == 1);
    CHECK(d.cause.find("HUNG at step 80") != std::string::npos);
    CHECK(diagnosis_text(d).find("warning: ledger") != std::string::npos);
  }
  SECTION("an unknown run is one line naming what it looked for") {
    o.target = "nope";
    REQUIRE_THROWS_CONTAINING(diagnose(o), "'nope'", "--ledger");
  }
}
