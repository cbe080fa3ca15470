// Honest comparisons: the effect in units of the noise floor, the choice of a peer's best variant,
// bench_report --verify's verdicts on made-up ladder rows (a fake measure: nothing is timed), and
// the report's family sections drawn from made-up rows.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "bench/measure/stats.h"
#include "bench/report/report.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/rows.h"
#include "studies/buckets/buckets_study.h"
#include "studies/buckets/rows.h"
#include "studies/compare_torch/compare_torch.h"
#include "studies/cost_to_accuracy/rows.h"
#include "studies/ladder/verify.h"
#include "studies/registry.h"
#include "studies/scaling/rows.h"
#include "studies/scaling/scaling_study.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

// A rung row as the ladder writes it (read through its struct, as the report reads it).
LadderRungRow rung(const std::string& name, std::vector<double> repeats, bool calibration = false) {
  const Summary s = summarize(repeats);
  const json phase = {{"seconds_per_step", 0.01}, {"share", 0.25}};
  return from_json<LadderRungRow>(
      json{{"kind", "rung"},
           {"status", "ok"},
           {"run_id", "R1"},
           {"rung", name},
           {"rung_index", 0},
           {"calibration", calibration},
           {"repeats", repeats},
           {"stats", to_json(s)},
           {"breakdown", {{"data_wait", phase}, {"forward", phase}, {"backward", phase}, {"optimizer", phase}}},
           {"device", {{"name", "Test CPU"}, {"type", "cpu"}}},
           {"versions", {{"engine", "abc123"}}},
           {"config", json::object()}});
}

// A report section built from made-up rows, as bench_report builds it from a ledger.
std::optional<ReportSection> section_from(const SectionDef& def, const std::vector<json>& rows) {
  Ledger::Loaded loaded;
  loaded.path = "made-up rows";
  for (const json& row : rows) {
    loaded.rows.push_back(row);
    loaded.lines.push_back(loaded.rows.size());
  }
  std::vector<std::string> warnings;
  const SectionInput input{loaded, "", warnings};
  auto section = def.build(input);
  for (const auto& w : warnings) WARN(w);
  return section;
}

}  // namespace

TEST_CASE("noise floor: the effect as a multiple of the floor, and the words every verdict line prints", "[bench]") {
  CHECK(floor_multiple(12.0, 3.0) == Approx(4.0));
  CHECK(floor_multiple(-12.0, 3.0) == Approx(4.0));  // the size of the effect, either way
  CHECK(std::isinf(floor_multiple(1.0, 0.0)));       // identical arms: any effect is infinitely many floors
  CHECK(floor_multiple(0.0, 0.0) == 0.0);
  CHECK(std::isnan(floor_multiple(1.0, -1.0)));  // no floor measured

  const Calibration c = calibrate({100, 101, 99}, {102, 103, 101});  // medians 100 and 102: 1.98%
  CHECK(c.noise_floor_percent == Approx(200.0 / 101.0));
  CHECK(effect_words(7.0, c, Verdict::separable) == "+7.0% (3.5x the noise floor), separable");
  CHECK(effect_words(-1.0, c, Verdict::not_separable) == "-1.0% (0.5x the noise floor), not separable");
  CHECK(effect_words(5.0, std::nullopt, Verdict::separable) == "+5.0% (no noise floor measured), separable");
  CHECK(floor_multiple_text(5.0, std::nullopt) == "-");
}

TEST_CASE("best variant: the highest median wins; ties go to the higher minimum, then the earlier name", "[bench]") {
  CHECK(best_by_median({"a", "b"}, {{100, 101, 300}, {150, 151, 152}}) == 1);  // not the highest single value
  CHECK(best_by_median({"a", "b"}, {{90, 100, 110}, {95, 100, 105}}) == 1);    // same median, steadier
  CHECK(best_by_median({"a", "b"}, {{95, 100, 105}, {95, 100, 105}}) == 0);    // a full tie: the earlier
  CHECK(best_by_median({"a", "b"}, {{}, {1.0}}) == 1);                         // unmeasured passed over
  CHECK_THROWS_WITH(best_by_median({"a"}, {{}}), Catch::Contains("no alternative has a measurement"));
}

TEST_CASE("verify: the sample is spread over the ladder and always holds its last rung", "[bench]") {
  CHECK(verify_sample(5, 1) == std::vector<std::size_t>{4});
  CHECK(verify_sample(5, 2) == std::vector<std::size_t>{0, 4});
  CHECK(verify_sample(5, 3) == std::vector<std::size_t>{0, 2, 4});
  CHECK(verify_sample(3, 10) == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("verify: re-runs inside the recorded spread pass, outside are named, on another machine by ratio",
          "[bench]") {
  // Recorded: the reference at 100 (calibration A) and 102 (B): floor 1.98%; rung fast at 1.9-2.1x it,
  // rung slow at 0.5x.
  const std::vector<LadderRungRow> rows = {
      rung("calibration A", {100, 100, 100}, true), rung("calibration B", {102, 102, 102}, true),
      rung("baseline", {100, 101, 99}), rung("fast", {190, 200, 210}), rung("slow", {50, 50, 50})};
  SECTION("a machine three times faster, same ratios: every figure within") {
    const Measure fake = [](const LadderRungRow& row) {
      const std::string r = row.arm.rung;
      return 3 * (r == "fast" ? 200.0 : r == "slow" ? 50.0 : 100.0);
    };
    std::ostringstream log;
    const auto result = verify_ladder(rows, fake, 2, 3, &log);
    REQUIRE(result.rows.size() == 2);  // baseline is not the reference here, so: baseline and slow (the last)
    CHECK(result.reference == "calibration A");
    CHECK(result.rows[0].rung == "baseline");
    CHECK(result.rows[1].rung == "slow");
    CHECK(result.noise_floor_percent == Approx(200.0 / 101.0));
    for (const auto& v : result.rows) CHECK(v.within);
    CHECK(result.rows[1].rerun == std::vector<double>{0.5, 0.5, 0.5});
    const std::string text = verify_text(result, "def456");
    CHECK_THAT(text, Catch::Contains("2 of 2 re-run figures within"));
    CHECK_THAT(text, Catch::Contains("engine abc123"));
    CHECK_THAT(text, Catch::Contains("by engine def456"));
    CHECK_THAT(log.str(), Catch::Contains("verify round 3/3"));
  }
  SECTION("a rung 10% slower than recorded, beyond the floor: OUTSIDE, with how far") {
    const Measure fake = [](const LadderRungRow& row) {
      const std::string r = row.arm.rung;
      return r == "slow" ? 45.0 : r == "fast" ? 200.0 : 100.0;
    };
    const auto result = verify_ladder(rows, fake, 3, 2);
    REQUIRE(result.rows.size() == 3);
    CHECK(result.rows[0].within);   // baseline
    CHECK(result.rows[1].within);   // fast
    CHECK(!result.rows[2].within);  // slow: 0.45 against an allowed 0.49-0.51
    CHECK(result.rows[2].allowed_lo == Approx(0.5 * (1 - 0.0198)).epsilon(1e-3));
    const std::string text = verify_text(result, "x");
    CHECK_THAT(text, Catch::Contains("OUTSIDE (-8.2% below the allowed range)"));
    CHECK_THAT(text, Catch::Contains("2 of 3 re-run figures within"));
  }
  SECTION("just inside the widened edge passes; a run without calibration arms uses its baseline, floor 0") {
    const std::vector<LadderRungRow> plain = {rung("baseline", {100, 100}), rung("fast", {190, 210})};
    const Measure at_edge = [](const LadderRungRow& row) { return row.arm.rung == "fast" ? 210.0 : 100.0; };
    const auto result = verify_ladder(plain, at_edge, 1, 2);
    CHECK(result.reference == "baseline");
    CHECK(result.noise_floor_percent == 0);
    REQUIRE(result.rows.size() == 1);
    CHECK(result.rows[0].within);
    const Measure beyond = [](const LadderRungRow& row) { return row.arm.rung == "fast" ? 211.0 : 100.0; };
    CHECK(!verify_ladder(plain, beyond, 1, 2).rows[0].within);
  }
  SECTION("bad input is named") {
    const Measure fake = [](const LadderRungRow&) { return 1.0; };
    CHECK_THROWS_WITH(verify_ladder(rows, fake, 0, 1), Catch::Contains("--sample 0"));
    CHECK_THROWS_WITH(verify_ladder({rung("only", {1})}, fake, 1, 1), Catch::Contains("only its reference rung"));
    auto gpu = rows;
    for (auto& r : gpu) r.header.env.device.type = "cuda";
    CHECK_THROWS_WITH(verify_ladder(gpu, fake, 1, 1), Catch::Contains("measured on a cuda device"));
  }
}

TEST_CASE("report families: all-reduce, bucket sweep, scaling and compare_torch sections from made-up rows",
          "[bench]") {
  const json device = {{"name", "Test CPU"}, {"type", "cpu"}};
  // The comm studies' rows as their writers make them: through their structs.
  const auto header = [&](const char* kind, const char* run_id) {
    RowHeader h;
    h.env.device = {"cpu", "Test CPU"};
    h.kind = kind;
    h.run_id = run_id;
    h.status = "ok";
    return h;
  };
  std::vector<json> rows;
  for (const char* algorithm : {"ring", "native"}) {
    for (std::int64_t bytes : {4096, 1 << 20}) {
      const double t = (algorithm == std::string("ring") ? 1.1 : 1.0) * bytes * 1e-9;
      AllreduceRow row;
      row.header = header(AllreduceRow::kKind, "A1");
      row.config.algorithm = algorithm;
      row.config.bytes = bytes;
      row.config.ranks = 2;
      row.config.communicator = "mpi";
      row.stats = summarize({t, t * 1.01, t * 0.99});
      row.busbw_gbps = bytes / t * 1e-9;
      row.memcpy_gbps = 5.0;
      row.noise_floor_percent = 2.0;
      rows.push_back(to_json(row));
    }
  }
  for (int round = 0; round < 2; ++round) {
    for (int w : {1, 2}) {
      ScalingRow row;
      row.header = header(ScalingRow::kKind, "S1");
      row.config.mode = "weak";
      row.config.world = w;
      row.config.global_batch = 32 * w;
      row.config.decode_cost = 0;
      row.config.bind = "none";
      row.samples_per_s = w == 1 ? 1000.0 : 1800.0 + 100 * round;
      rows.push_back(to_json(row));
      // The peer's output as torch_ddp.py prints it (free-form; the row keeps it whole).
      json peer = json::object();
      peer["variants"]["shipped"]["samples_per_s"] = w == 1 ? 500.0 : 800.0;
      peer["variants"]["channels_last"]["samples_per_s"] = w == 1 ? 600.0 : 1080.0;
      ScalingPeerRow peer_row;
      peer_row.header = header(ScalingPeerRow::kKind, "S1");
      peer_row.config.mode = "weak";
      peer_row.config.world = w;
      peer_row.peer = peer;
      rows.push_back(to_json(peer_row));
    }
  }
  rows.push_back({{"kind", "compare_torch"},
                  {"status", "ok"},
                  {"run_id", "C1"},
                  {"device", device},
                  {"config_name", "onednn f32 nhwc fused"},
                  {"peer", "torch f32 fc1_as_conv8x8+channels_last"},
                  // As compare_torch.py writes them: median, min, max and n, no mean or std.
                  {"samples_per_s", {{"median", 2050.0}, {"min", 2000.0}, {"max", 2100.0}, {"n", 2}}},
                  {"peer_samples_per_s", {{"median", 1950.0}, {"min", 1900.0}, {"max", 2000.0}, {"n", 2}}},
                  {"ratio_per_round", {1.05, 1.05}}});

  const auto allreduce = section_from(allreduce_report_section(), rows);
  REQUIRE(allreduce);
  CHECK_THAT(allreduce->markdown, Catch::Contains("| 4K | "));
  CHECK_THAT(allreduce->markdown, Catch::Contains("+10.0% (5.0x the noise floor)"));
  REQUIRE(allreduce->figures.size() == 1);
  CHECK_THAT(allreduce->figures[0].second, Catch::Contains("single-core memcpy (5.00 GB/s)"));

  const auto scaling = section_from(scaling_report_section(), rows);
  REQUIRE(scaling);
  CHECK_THAT(scaling->markdown, Catch::Contains("| trainlab weak | 2 | 1850.0 (1800.0-1900.0) | 92.5% (90.0-95.0) |"));
  // The peer's best variant by median at world 2 is channels_last (1080 against 800): 90% efficiency.
  CHECK_THAT(scaling->markdown, Catch::Contains("| PyTorch DDP channels_last | 2 | 1080.0 (1080.0-1080.0) | 90.0%"));

  const auto compare = section_from(compare_torch_report_section(), rows);
  REQUIRE(compare);
  CHECK_THAT(compare->markdown, Catch::Contains("| 2050 (2000-2100) | 1950 (1900-2000) | 1.05x (1.05-1.05) |"));
  CHECK_THAT(compare->figures[0].second, Catch::Contains("onednn f32 nhwc fused"));

  CHECK(!section_from(buckets_report_section(), rows));  // no bucket sweep among these rows: no section
}

// Issue 30, item 26: a row of the comm and cost studies' kinds with a wrong type in a field its
// section reads is skipped, named by its line in the report's warnings; the report still draws
// every section from the rows that fit.
TEST_CASE("report families: a damaged row of each comm and cost kind is skipped with its line, never an abort",
          "[bench]") {
  const auto dir = std::filesystem::temp_directory_path() / ("trainlab-damaged-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Ledger ledger((dir / "ledger.jsonl").string());
  const auto header = [](const char* kind, const char* run_id) {
    RowHeader h;
    h.env.device = {"cpu", "Test CPU"};
    h.kind = kind;
    h.run_id = run_id;
    h.status = "ok";
    return h;
  };
  std::size_t line = 0;
  std::vector<std::pair<std::size_t, std::string>> damaged;  // line, the field the warning names
  // Appends `row` with the field at `pointer` replaced by a string: a wrong type.
  const auto append_damaged = [&](json row, const char* pointer) {
    row[json::json_pointer(pointer)] = "garbled";
    ledger.append_json(row);
    damaged.emplace_back(++line, std::string(pointer).substr(1) + " is \"garbled\"");
  };

  AllreduceRow allreduce;
  allreduce.header = header(AllreduceRow::kKind, "A1");
  allreduce.config.ranks = 2;
  allreduce.config.communicator = "mpi";
  allreduce.memcpy_gbps = 5.0;
  for (const char* algorithm : {"ring", "native"}) {
    for (std::int64_t bytes : {4096, 8192}) {
      allreduce.config.algorithm = algorithm;
      allreduce.config.bytes = bytes;
      allreduce.stats = summarize({1e-6 * static_cast<double>(bytes / 4096), 2e-6 * static_cast<double>(bytes / 4096)});
      allreduce.busbw_gbps = 1.0;
      ledger.append(allreduce);
      ++line;
    }
  }
  append_damaged(to_json(allreduce), "/stats/median");
  append_damaged(to_json(allreduce), "/config/bytes");

  AllreduceBucketsRow bucket;
  bucket.header = header(AllreduceBucketsRow::kKind, "B1");
  bucket.config = {2, 1 << 20, 1 << 16, 16, "f32", "ring", "SmallCNN"};
  bucket.stats = summarize({1e-3, 1.2e-3});
  bucket.predicted_s = 1.1e-3;
  bucket.ideal_s = 0.9e-3;
  ledger.append(bucket);
  ++line;
  append_damaged(to_json(bucket), "/predicted_s");

  for (int w : {1, 2}) {
    ScalingRow scaling;
    scaling.header = header(ScalingRow::kKind, "S1");
    scaling.config.mode = "weak";
    scaling.config.world = w;
    scaling.config.global_batch = 32 * w;
    scaling.samples_per_s = 1000.0 * w;
    ledger.append(scaling);
    ++line;
    ScalingPeerRow peer;
    peer.header = header(ScalingPeerRow::kKind, "S1");
    peer.config.mode = "weak";
    peer.config.world = w;
    peer.peer = {{"variants", {{"shipped", {{"samples_per_s", 500.0 * w}}}}}};
    ledger.append(peer);
    ++line;
    if (w == 2) {
      append_damaged(to_json(scaling), "/samples_per_s");
      append_damaged(to_json(peer), "/peer/variants/shipped/samples_per_s");
    }
  }

  CostRepeatRow repeat;
  repeat.header = header(CostRepeatRow::kKind, "C1");
  repeat.study = "cost_test";
  repeat.config_name = "batch64";
  repeat.batch = 64;
  repeat.lr = 0.01;
  repeat.dtype = "f32";
  repeat.target = 0.5;
  repeat.eval_every = 25;
  repeat.step_cap = 200;
  repeat.rate = 1.0;
  repeat.samples_per_s = 400;
  repeat.reached = true;
  repeat.steps_to_target = 50;
  ledger.append(repeat);
  ++line;
  CostBreakEvenRow even;
  even.header = header(CostBreakEvenRow::kKind, "C1");
  even.scaling_run = "S1";
  even.world = 1;
  even.global_batch = 64;
  even.samples_per_s = 400;
  even.config_name = "batch64";
  ledger.append(even);
  ++line;
  append_damaged(to_json(even), "/dollars");
  append_damaged(to_json(repeat), "/target");  // the latest cost row: skipped, the run before it reported

  ReportOptions options;
  options.ledger_path = ledger.path();
  options.out_path = (dir / "REPORT.md").string();
  std::string md;
  REQUIRE_NOTHROW(md = write_report(options, report_sections()));
  for (const auto& [at, field] : damaged) {
    INFO("line " << at << ": " << field);
    CHECK_THAT(md, Catch::Contains("- ledger warning: ledger '" + ledger.path() + "' line " + std::to_string(at) +
                                   " skipped: " + field));
  }
  for (const char* heading : {"## Cost to accuracy", "## All-reduce: bus bandwidth against size",
                              "## Bucket sweep against the alpha-beta model", "## Weak and strong scaling efficiency",
                              "Scaling break-even (bench_scaling run `S1`"})
    CHECK_THAT(md, Catch::Contains(heading));
  CHECK_THAT(md, Catch::Contains("| 8K | "));                       // both all-reduce sizes, from the rows that fit
  CHECK_THAT(md, Catch::Contains("| trainlab weak | 2 | 2000.0"));  // the damaged world-2 row is not among them
  CHECK_THAT(md, Catch::Contains("| PyTorch DDP shipped | 2 | 1000.0 (1000.0-1000.0) | 100.0%"));
  std::filesystem::remove_all(dir);
}
