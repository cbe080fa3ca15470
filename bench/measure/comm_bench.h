// The communication benchmarks' one harness (bench_allreduce and bench_buckets time through it;
// bench_scaling shares its set-up), in nccl-tests' way:
//
//   CommHarness harness(*world, Collective::allreduce);
//   std::vector<CommArm> arms = {{"ring", bytes, [&](int) { ring_allreduce(...); }},
//                                {"native", bytes, [&](int) { comm.allreduce_native(...); }}};
//   for (const ArmTiming& t : harness.time(arms, schedule)) ... t.stats, t.busbw_gbps, t.noise_floor
//
// Every iteration starts after a barrier of the host-side world and its time is the slowest rank's
// (the largest over the ranks); warm-up calls are excluded and set the iteration count (a time
// budget over the slowest warm-up call, within [min, max]); the arms run round-robin (one call of
// each per round) so drift hits them alike. algbw = S / t and busbw = algbw x the collective's
// factor (nccl-tests' definitions), at the median; the noise floor of an arm is its even
// iterations against its odd ones (the same configuration, interleaved). A result check runs on
// every rank and holds only where it held on all of them. Byte sizes on the command line, and the
// single-core memcpy rate every busbw is compared with, are here too.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::comm {
class MpiCommunicator;
}

namespace trainlab::bench {

// ---- sizes

// "4096", "4K", "4KiB", "2.5M", "1G" (K, M, G are powers of 1024). Throws Error naming the text.
std::int64_t parse_byte_size(const std::string& text, const std::string& what);
// "4K..256M" (every power of two from LO to HI), or a list "4K,1M,64M".
std::vector<std::int64_t> parse_byte_sizes(const std::string& spec, const std::string& what);
// Refuses (Error, naming the size) a size that is not a whole number of `element_bytes` elements
// (never rounded silently), and a largest size whose `buffers_per_rank` buffers, on every rank
// this host runs (OMPI_COMM_WORLD_LOCAL_SIZE and the like), need more memory than is available.
void check_message_sizes(const std::vector<std::int64_t>& sizes, std::int64_t element_bytes, const std::string& dtype,
                         int buffers_per_rank, const std::string& what);
// 4096 -> "4K", 3 MiB -> "3M", odd sizes in bytes ("4300000B").
std::string human_bytes(std::int64_t bytes);
// Single-core memcpy rate in GB/s (1e9 bytes/s): the median of ten 64 MiB copies after two warm-ups.
double memcpy_gbps();

// ---- set-up

// The ledger environment of a run over MPI: `backend`'s, with the MPI library's version.
Environment mpi_environment(Backend& backend);

// A one-process baseline beside a run of `world`'s ranks, on the same cores: while it lives, this
// process's threads may run on every CPU any rank of `world` may (the union of their masks; mpirun
// binds a rank to one core at 2 ranks or fewer, and a process's OpenMP threads would share it);
// then each thread gets its own mask back. A collective of `world` when made (every rank), used
// by one rank.
class JobCpus {
 public:
  explicit JobCpus(comm::MpiCommunicator& world);
  const std::vector<int>& cpus() const { return cpus_; }
  // Runs `work` with this process's threads on every CPU of the job.
  void on_every_cpu(const std::function<void()>& work) const;

 private:
  std::vector<int> cpus_;
};
// What bench_allreduce and bench_buckets share at set-up: the single-core memcpy rate (measured on
// rank 0 while the others wait, then given to every rank) and the environment of a host run (the
// default CPU backend on one thread, with the MPI library's version).
struct CommSetup {
  double memcpy_gbps = 0;
  Environment env;
};
CommSetup comm_setup(comm::MpiCommunicator& world);

// ---- the harness

enum class Collective { allreduce, reduce_scatter, allgather, broadcast };
// nccl-tests' names: all_reduce, reduce_scatter, all_gather, broadcast (Error naming the allowed).
const char* collective_name(Collective collective);
Collective parse_collective(const std::string& name);
// nccl-tests' bus-bandwidth factor at `ranks` ranks: all-reduce 2(P-1)/P, reduce-scatter and
// all-gather (P-1)/P, broadcast 1.
double busbw_factor(Collective collective, int ranks);

// One thing to time: a call every rank makes, moving `bytes` per rank. `sample` is the number of
// measured iterations the arm has so far (0 during its warm-up): an arm may walk through a buffer.
struct CommArm {
  std::string name;
  std::int64_t bytes = 0;
  std::function<void(int sample)> call;
};

struct CommSchedule {
  int warmup = 3;                // warm-up calls per arm, excluded (at least one is made: it sets the count)
  double seconds_per_arm = 0.4;  // the budget: iterations = this / the slowest warm-up call
  int min_iters = 5, max_iters = 500;
  // Paired arms (the ring against native at one size) warm up in rounds, one call of each, and run
  // one count (the slowest arm's); unpaired arms warm up one after another and each runs its own.
  bool paired = false;
  std::function<void(int round, int rounds)> after_round;  // every rank, after each measured round
};

struct ArmTiming {
  std::string name;
  std::int64_t bytes = 0;
  int warmup_calls = 0;
  std::vector<double> seconds;  // every measured iteration, the slowest rank's
  Summary stats;
  std::optional<Calibration> noise_floor;  // even against odd iterations (none below two)
  double algbw_gbps = 0, busbw_gbps = 0;   // at the median
};

// One size of a sweep: its arms, and the check of their result: the elements this rank found
// wrong, over every arm (nccl-tests' #wrong; the buffers the arms time are left as the timing wants
// them).
struct SizeCase {
  std::vector<CommArm> arms;
  std::function<std::int64_t()> check;
};
struct SizeTiming {
  std::int64_t bytes = 0;  // as asked
  std::int64_t wrong = 0;  // wrong elements, summed over the ranks
  bool correct = false;    // none
  std::vector<ArmTiming> arms;
};

class CommHarness {
 public:
  // `world`: the host-side bookkeeping (barriers, the slowest rank, checks); the collectives the
  // arms call may run on another communicator (NCCL on the device).
  CommHarness(comm::MpiCommunicator& world, Collective collective);
  int ranks() const { return ranks_; }
  double busbw_factor() const { return factor_; }
  double algbw_gbps(std::int64_t bytes, double seconds) const { return static_cast<double>(bytes) / seconds * 1e-9; }

  // One iteration: a barrier, the call, the slowest rank's seconds.
  double time_one(const std::function<void()>& call);
  // A result check each rank made: true where it held on every rank.
  bool on_every_rank(bool ok);
  // A count each rank made, summed over the ranks.
  std::int64_t sum_over_ranks(std::int64_t count);
  // The arms timed together, warm-up excluded, round-robin.
  std::vector<ArmTiming> time(const std::vector<CommArm>& arms, const CommSchedule& schedule);
  // Size by size: `prepare` gives the size's arms and check, the check runs on every rank, the arms
  // are timed; `done` sees each size's result before the next size starts (to print it, to append
  // its rows). Returns every size's.
  std::vector<SizeTiming> sweep(const std::vector<std::int64_t>& sizes,
                                const std::function<SizeCase(std::int64_t bytes)>& prepare,
                                const CommSchedule& schedule, const std::function<void(const SizeTiming&)>& done);

 private:
  ArmTiming summarise(const CommArm& arm, int warmup_calls, std::vector<double> seconds) const;
  comm::MpiCommunicator& world_;
  int ranks_ = 1;
  double factor_ = 1;
};

}  // namespace trainlab::bench
