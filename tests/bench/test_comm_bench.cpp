// The comm-bench harness (bench/measure/comm_bench.h) under mpirun: each iteration the slowest
// rank's, warm-up calls excluded and counted, the iteration count within its bounds (paired arms
// one count), the arms told how many samples they have, a check that holds only where it held on
// every rank, and nccl-tests' bus-bandwidth factors. Nothing here asserts how fast anything is.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/measure/comm_bench.h"
#include "comm/mpi_communicator.h"

using namespace trainlab;
using namespace trainlab::bench;

TEST_CASE("comm-bench harness: nccl-tests' bus-bandwidth factors", "[comm]") {
  CHECK(busbw_factor(Collective::allreduce, 4) == Approx(1.5));
  CHECK(busbw_factor(Collective::allreduce, 1) == Approx(0.0));
  CHECK(busbw_factor(Collective::reduce_scatter, 4) == Approx(0.75));
  CHECK(busbw_factor(Collective::allgather, 2) == Approx(0.5));
  CHECK(busbw_factor(Collective::broadcast, 8) == Approx(1.0));
}

TEST_CASE("comm-bench harness: the slowest rank's time, the counts, the samples, the check on every rank", "[comm]") {
  auto world = comm::MpiCommunicator::world();
  const int P = world->size(), rank = world->rank();
  CommHarness harness(*world, Collective::allreduce);
  CHECK(harness.ranks() == P);
  CHECK(harness.busbw_factor() == Approx(2.0 * (P - 1) / P));

  // Rank r sleeps 2r ms: every rank's time is at least the slowest rank's sleep.
  const double t = harness.time_one([&] { std::this_thread::sleep_for(std::chrono::milliseconds(2 * rank)); });
  CHECK(t >= 2e-3 * (P - 1));

  // A budget far below one call: the minimum count; far above: the maximum. Paired arms share it.
  CommSchedule schedule;
  schedule.warmup = 2;
  schedule.min_iters = 3;
  schedule.max_iters = 7;
  schedule.paired = true;
  int rounds_seen = 0;
  schedule.after_round = [&](int round, int rounds) {
    CHECK(round == rounds_seen);
    CHECK(rounds == 3);
    ++rounds_seen;
  };
  std::vector<int> samples_a, samples_b;
  const std::vector<CommArm> arms = {{"a", 1024,
                                      [&](int sample) {
                                        samples_a.push_back(sample);
                                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                                      }},
                                     {"b", 4096, [&](int sample) { samples_b.push_back(sample); }}};
  schedule.seconds_per_arm = 1e-9;
  const auto low = harness.time(arms, schedule);
  REQUIRE(low.size() == 2);
  CHECK(rounds_seen == 3);
  for (const ArmTiming& timing : low) {
    CHECK(timing.warmup_calls == 2);
    CHECK(timing.seconds.size() == 3);
    CHECK(timing.stats.n == 3);
    REQUIRE(timing.noise_floor);  // iterations 0 and 2 against 1
    CHECK(timing.algbw_gbps == Approx(static_cast<double>(timing.bytes) / timing.stats.median * 1e-9));
    CHECK(timing.busbw_gbps == Approx(timing.algbw_gbps * harness.busbw_factor()));
  }
  CHECK(low[0].name == "a");
  CHECK(low[1].bytes == 4096);
  // Warm-up calls see sample 0; measured calls, the samples the arm has so far.
  CHECK(samples_a == std::vector<int>{0, 0, 0, 1, 2});
  CHECK(samples_b == std::vector<int>{0, 0, 0, 1, 2});

  schedule.after_round = nullptr;
  schedule.seconds_per_arm = 1e6;
  schedule.paired = false;
  schedule.warmup = 0;  // at least one warm-up call is made: it sets the count
  const auto high = harness.time(arms, schedule);
  for (const ArmTiming& timing : high) {
    CHECK(timing.warmup_calls == 1);
    CHECK(timing.seconds.size() == 7);
  }

  // Size by size: the check holds only where it held on every rank (the last rank fails at 8 bytes).
  schedule.seconds_per_arm = 1e-9;
  std::vector<std::int64_t> done;
  const auto sizes = harness.sweep(
      {4, 8},
      [&](std::int64_t bytes) {
        SizeCase size;
        size.arms = {{"x", bytes, [](int) {}}};
        size.check = [bytes, rank, P] { return std::int64_t{bytes == 8 && rank == P - 1 ? 3 : 0}; };
        return size;
      },
      schedule, [&](const SizeTiming& timing) { done.push_back(timing.bytes); });
  REQUIRE(sizes.size() == 2);
  CHECK(sizes[0].correct);
  CHECK(sizes[0].wrong == 0);
  CHECK_FALSE(sizes[1].correct);
  CHECK(sizes[1].wrong == 3);
  CHECK(sizes[1].arms.at(0).bytes == 8);
  CHECK(done == std::vector<std::int64_t>{4, 8});
}
