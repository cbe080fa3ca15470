// The alpha-beta ring model (comm/cost_model): seed 001's figures reproduced, and the fit
// recovering known parameters and detecting two regimes; seed 003's memory accounting.
#include <catch2/catch.hpp>
#include <cmath>

#include "comm/cost_model.h"
#include "engine/instrument/memory_model.h"

using namespace trainlab::comm;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Seed 001's inputs: 32 GPUs, 25 GB/s, 20 us, 1.3 B parameters at 2 bytes, a 400 ms step.
CostQuestion seed_question() {
  CostQuestion q;
  q.model.ranks = 32;
  q.model.bandwidth_Bps = 25e9;
  q.model.alpha_s = 20e-6;
  q.params = 1.3e9;
  q.bytes_per_param = 2;
  q.step_s = 0.4;
  q.buckets_mib = {1, 8, 16, 25, 100};
  q.scale_to = 256;
  return q;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

}  // namespace

TEST_CASE("cost model: seed 001's 32-rank figures", "[cost]") {
  const CostQuestion q = seed_question();
  const RingModel& m = q.model;
  const double S = q.params * q.bytes_per_param;
  CHECK(m.latency_term_s() * 1e3 == Approx(1.24).margin(1e-9));
  CHECK(m.bandwidth_term_s(S) * 1e3 == Approx(201.5).margin(1e-9));
  CHECK(m.time_s(S) * 1e3 == Approx(202.7).margin(0.05));
  CHECK(m.time_s(S) / q.step_s == Approx(0.507).margin(0.0005));
  CHECK(m.crossover_bytes() / kMiB == Approx(15.26).margin(0.005));
  // The bucket table, in the seed's order: 1, 8, 16, 25, 100 MiB.
  const double rows[] = {3276.7, 585.9, 393.7, 325.5, 232.5};
  const std::int64_t counts[] = {2480, 310, 155, 100, 25};
  for (int i = 0; i < 5; ++i) {
    INFO(q.buckets_mib[i] << " MiB buckets");
    CHECK(m.bucket_count(S, q.buckets_mib[i] * kMiB) == counts[i]);
    CHECK(m.bucketed_time_s(S, q.buckets_mib[i] * kMiB) * 1e3 == Approx(rows[i]).margin(0.05));
  }
}

TEST_CASE("cost model: seed 001's 256-rank scaling table", "[cost]") {
  CostQuestion q = seed_question();
  RingModel big = q.model;
  big.ranks = 256;
  const double S = q.params * q.bytes_per_param;
  CHECK(big.time_s(S) * 1e3 == Approx(217.4).margin(0.05));
  CHECK(big.time_s(S) / q.step_s == Approx(0.543).margin(0.0005));
  CHECK(big.latency_term_s() * 1e3 == Approx(10.2).margin(1e-9));
  // The seed's table prints 207.0 ms for this term, but its own total (217.4 ms = 10.2 + x) needs
  // 207.2: the formula 2 * 255/256 * 2.6e9 / 25e9 gives 207.19 ms, which is what we print.
  CHECK(big.bandwidth_term_s(S) * 1e3 == Approx(207.19).margin(0.005));
  CHECK(big.crossover_bytes() / kMiB == Approx(122.07).margin(0.005));
  CHECK(big.bucketed_time_s(S, 25 * kMiB) * 1e3 == Approx(1227.2).margin(0.05));
}

TEST_CASE("cost model: the report states units and every figure", "[cost]") {
  const std::string text = collective_cost_report(seed_question());
  for (const char* fragment : {"1 MiB = 2^20 bytes",
                               "1 GB/s = 1e9 bytes/s",
                               "2479.6 MiB",
                               "1.24 ms",
                               "201.5 ms",
                               "202.7 ms",
                               "50.7%",
                               "66.4%",
                               "266.7 ms",
                               "fits inside",
                               "communication-sensitive",
                               "15.26 MiB",
                               "3276.7",
                               "585.9",
                               "393.7",
                               "325.5",
                               "232.5",
                               "217.4 ms",
                               "54.3%",
                               "10.20 ms",
                               "122.07 MiB",
                               "1227.2 ms",
                               "no listed bucket is within 15%",
                               "103.3 MiB"}) {
    INFO(fragment);
    CHECK(contains(text, fragment));
  }
}

TEST_CASE("cost model: seed 001's part (e), the three fixes", "[cost]") {
  CostQuestion q = seed_question();
  CHECK_FALSE(contains(collective_cost_report(q), "(e) the fixes"));  // only when asked
  q.accumulate = 4;
  q.zero_stage = 2;
  q.node_size = 8;
  q.intra_bandwidth_Bps = 300e9;
  q.intra_alpha_s = 20e-6;
  const std::string report = collective_cost_report(q);
  INFO(report);
  // Accumulation: T unchanged against 4 x 400 ms of compute.
  CHECK(contains(report, "T = 202.7 ms (unchanged) against 1600 ms of compute: 12.7% of it (was 50.7%)"));
  CHECK(contains(report, "= 88.8% efficiency (was 66.4%)"));
  // ZeRO-2: the same volume; 16 Psi -> 2 Psi + 14 Psi / 32 (seed 001 prints 3.48; the arithmetic gives 2.95).
  CHECK(contains(report, "ZeRO-2: 2 ring collectives"));
  CHECK(contains(report, "202.7 ms (all-reduce: 202.7 ms)"));
  CHECK(contains(report, "= 2.95 GiB (was 19.37 GiB)"));
  // Hierarchical: 7.72 + 19.62 + 7.72 ms.
  CHECK(contains(report, "reduce-scatter inside each node 7.72 ms"));
  CHECK(contains(report, "across 4 nodes 19.62 ms"));
  CHECK(contains(report, "= 35.1 ms, against 202.7 ms for the flat ring (5.8x faster)"));
  CHECK(contains(report, "310 MiB instead of 2480 MiB"));

  const ZeroTraffic z3 = zero_traffic(q.model, 2.6e9, 3);
  CHECK(z3.collectives == 3);
  CHECK(z3.time_s == Approx(3 * 31 * 20e-6 + 3.0 * 31 / 32 * 2.6e9 / 25e9));
  CHECK(zero_traffic(q.model, 2.6e9, 1).bytes_per_rank == Approx(zero_traffic(q.model, 2.6e9, 0).bytes_per_rank));
  CHECK_THROWS_WITH(zero_traffic(q.model, 1, 4), Catch::Contains("--zero") && Catch::Contains("4"));
  q.node_size = 5;
  CHECK_THROWS_WITH(collective_cost_report(q), Catch::Contains("--node-size 5") && Catch::Contains("--gpus 32"));
  q.node_size = 32;  // one node: nothing crosses
  CHECK(hierarchical_allreduce(q, 2.6e9).inter_allreduce_s == 0);
}

TEST_CASE("cost model: bad questions are refused, naming the value", "[cost]") {
  CostQuestion q = seed_question();
  q.model.ranks = 1;
  CHECK_THROWS_WITH(collective_cost_report(q), Catch::Contains("--gpus must be >= 2, got 1"));
  q = seed_question();
  q.model.bandwidth_Bps = 0;
  CHECK_THROWS_WITH(collective_cost_report(q), Catch::Contains("--bw"));
}

TEST_CASE("cost model: the fit recovers a known alpha and B", "[cost]") {
  RingModel truth;
  truth.ranks = 4;
  truth.alpha_s = 15e-6;
  truth.bandwidth_Bps = 6e9;
  std::vector<std::pair<double, double>> points;
  for (double bytes = 4096; bytes <= 256 * kMiB; bytes *= 2) points.emplace_back(bytes, truth.time_s(bytes));
  const FitAnalysis analysis = analyse_fit(4, points);
  CHECK(analysis.one_line_fits);
  CHECK_FALSE(analysis.split);
  CHECK(analysis.one_line.model.alpha_s == Approx(15e-6).epsilon(1e-6));
  CHECK(analysis.one_line.model.bandwidth_Bps == Approx(6e9).epsilon(1e-6));
  CHECK(analysis.one_line.max_abs_relative_residual < 1e-9);
  CHECK(contains(fit_report(analysis, points), "verdict: one line fits"));
}

TEST_CASE("cost model: two regimes are found, not papered over with one line", "[cost]") {
  // Cache-resident below 1 MiB (fast), memory-bound from 1 MiB (3x slower per byte, less latency).
  RingModel cache, memory;
  cache.ranks = memory.ranks = 2;
  cache.alpha_s = 20e-6;
  cache.bandwidth_Bps = 20e9;
  memory.alpha_s = 2e-6;
  memory.bandwidth_Bps = 2e9;
  std::vector<std::pair<double, double>> points;
  for (double bytes = 4096; bytes <= 256 * kMiB; bytes *= 2)
    points.emplace_back(bytes, (bytes < kMiB ? cache : memory).time_s(bytes));
  const FitAnalysis analysis = analyse_fit(2, points);
  CHECK_FALSE(analysis.one_line_fits);
  REQUIRE(analysis.split);
  CHECK(analysis.split_bytes == kMiB);
  CHECK(analysis.lower.model.bandwidth_Bps == Approx(20e9).epsilon(1e-6));
  CHECK(analysis.upper.model.bandwidth_Bps == Approx(2e9).epsilon(1e-6));
  const std::string text = fit_report(analysis, points);
  CHECK(contains(text, "fits POORLY"));
  CHECK(contains(text, "two regimes"));
  CHECK(contains(text, "1 MiB"));
  CHECK_THROWS_WITH(fit_ring_model(2, {{4096, 1e-5}}), Catch::Contains("at least two measured sizes, got 1"));
}

TEST_CASE("cost model: a latency the sizes cannot resolve is held at zero, not fitted negative", "[cost]") {
  // Large messages only, with timing offsets that pull the best line's intercept below zero.
  std::vector<std::pair<double, double>> points;
  for (double bytes = 16 * kMiB; bytes <= 256 * kMiB; bytes *= 2) points.emplace_back(bytes, bytes / 4e9 - 50e-6);
  const Fit fit = fit_ring_model(2, points);
  CHECK(fit.alpha_unresolved);
  CHECK(fit.physical);
  CHECK(fit.model.alpha_s == 0);
  CHECK(fit.model.bandwidth_Bps == Approx(4e9).epsilon(0.02));  // B = 2(P-1)/P / slope = 1 / (1/4e9) at P = 2
  CHECK(fit.max_abs_relative_residual < 0.02);
}

// ---- seed 003's persistent-state accounting (engine/instrument/memory_model.h) ------------------------------

TEST_CASE("persistent state per worker: seed 003's figures and seed 001's ZeRO-2 case", "[cost]") {
  using trainlab::persistent_state;
  using trainlab::StateBytes;
  // Seed 003: 1e9 parameters, 8 workers, 16 bytes per parameter (2 + 2 + 4 + 8).
  const double expected[] = {16.00, 5.50, 3.75, 2.00};
  for (int stage = 0; stage < 4; ++stage) {
    const auto s = persistent_state(1e9, 8, stage, StateBytes{});
    CHECK(std::round(s.total() / 1e7) / 100 == Approx(expected[stage]));
  }
  const auto s1 = persistent_state(1e9, 8, 1, StateBytes{});
  CHECK(s1.params == Approx(2e9));
  CHECK(s1.grads == Approx(2e9));
  CHECK(s1.optimizer == Approx(1.5e9));
  // Seed 001 part (e): 1.3e9 parameters on 32 ranks; ZeRO-2 keeps 2 Psi of parameters and 14 Psi / 32
  // of gradients and optimiser state. Replicated: 16 Psi = 19.4 GiB, as the seed prints. The seed's
  // ZeRO-2 line says 2.42 + 1.06 = 3.48 GiB, but 14 Psi / 32 is 0.53 GiB (1.06 is 14 Psi / 16): the
  // arithmetic gives 2.95 GiB, and that is what is checked.
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  CHECK(persistent_state(1.3e9, 32, 0, StateBytes{}).total() / GiB == Approx(19.37).margin(0.01));
  const auto z2 = persistent_state(1.3e9, 32, 2, StateBytes{});
  CHECK(z2.params / GiB == Approx(2.42).margin(0.01));
  CHECK((z2.grads + z2.optimizer) / GiB == Approx(0.53).margin(0.01));
  CHECK(z2.total() / GiB == Approx(2.95).margin(0.01));
  // One worker: every stage is the replicated state.
  for (int stage = 0; stage < 4; ++stage) CHECK(persistent_state(5e8, 1, stage, StateBytes{}).total() == Approx(8e9));
  // trainlab's own bytes: f32 parameters and gradients, SGD momentum or AdamW's two moments.
  CHECK(trainlab::trainlab_state_bytes("sgd", 0.9).optimizer() == 4);
  CHECK(trainlab::trainlab_state_bytes("sgd", 0.0).optimizer() == 0);
  CHECK(trainlab::trainlab_state_bytes("adamw", 0.9).optimizer() == 8);
  CHECK_THROWS_WITH(persistent_state(1e9, 8, 4, StateBytes{}), Catch::Contains("must be 0, 1, 2 or 3, got 4"));
  CHECK_THROWS_WITH(persistent_state(0, 8, 1, StateBytes{}), Catch::Contains("parameters must be > 0"));
  CHECK_THROWS_WITH(trainlab::trainlab_state_bytes("lion", 0.9), Catch::Contains("'lion'"));
}

TEST_CASE("cost model: each all-reduce algorithm's terms, and the fit that recovers alpha and B", "[cost]") {
  using trainlab::AllreduceAlgorithm;
  const AllreduceCost ring4 = allreduce_cost(AllreduceAlgorithm::ring, 4);
  CHECK(ring4.steps == 6);
  CHECK(ring4.bytes_factor == Approx(1.5));
  const AllreduceCost rd4 = allreduce_cost(AllreduceAlgorithm::recursive_doubling, 4);
  CHECK(rd4.steps == 2);
  CHECK(rd4.bytes_factor == 2);
  const AllreduceCost hd4 = allreduce_cost(AllreduceAlgorithm::halving_doubling, 4);
  CHECK(hd4.steps == 4);
  CHECK(hd4.bytes_factor == Approx(1.5));
  // 5 ranks: four run the algorithm, the fifth folds in and out (2 steps of the whole buffer).
  const AllreduceCost hd5 = allreduce_cost(AllreduceAlgorithm::halving_doubling, 5);
  CHECK(hd5.steps == 6);
  CHECK(hd5.bytes_factor == Approx(3.5));
  CHECK(allreduce_cost(AllreduceAlgorithm::native, 2).steps == 2);
  CHECK(allreduce_cost(AllreduceAlgorithm::ring, 1).steps == 0);
  REQUIRE_THROWS_WITH(allreduce_cost(AllreduceAlgorithm::automatic, 4), Catch::Contains("resolve `auto`"));
  // Points drawn from alpha = 3 us, B = 5 GB/s over mixed algorithms: the fit gives them back.
  std::vector<AllreducePoint> points;
  for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0})
    for (const AllreduceCost& cost : {rd4, hd4, ring4}) points.push_back({cost, bytes, cost.time_s(3e-6, 5e9, bytes)});
  const AllreduceFit fit = fit_allreduce(points);
  CHECK(fit.alpha_s == Approx(3e-6).epsilon(1e-6));
  CHECK(fit.bandwidth_Bps == Approx(5e9).epsilon(1e-6));
  CHECK(fit.max_abs_relative_residual < 1e-9);
  REQUIRE_THROWS_WITH(fit_allreduce({points[0]}), Catch::Contains("at least two"));
}
