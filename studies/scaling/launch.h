// Inside the scaling study (studies/scaling/*.cpp): one launch of bench_scaling, set up once (the
// worlds' sub-communicators, the binding, the ledger environment), and its training runs, each a
// ledger row. The study's three forms each have their file: the scaling tables (tables.cpp), and
// the comparisons side by side, --zero / --grad-compress lists and --bind-compare (compare.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/measure/affinity.h"
#include "bench/measure/ledger.h"
#include "comm/mpi_communicator.h"
#include "engine/train/distributed.h"
#include "studies/scaling/scaling_study.h"

namespace trainlab::bench::scaling {

// The command line's lists, parsed and checked.
struct Plan {
  std::vector<int> worlds;                     // starting at 1, each at most the launched ranks
  std::vector<int> zeros;                      // ZeRO stages: one for every run, or several compared
  std::vector<GradCompression> compressions;   // DDP's hooks: one for every run, or several compared
  std::vector<AllreduceAlgorithm> allreduces;  // DDP's all-reduce: one for every run, or several compared
};
Plan plan_of(const ScalingOptions& o, int launched_ranks);

const char* compression_name(GradCompression c);
// The linear rule against a fixed base batch: the LR follows the global batch, never the per-worker
// one (the seed's bug).
double lr_for(const ScalingOptions& o, std::int64_t global_batch);
std::string ranks_per_core_text(int ranks, int cores);

// A training run's result, as rank 0 sees it.
struct Trained {
  double samples_per_s = 0;
  double comm_wait_s = 0;  // per step, rank 0's: the exposed all-reduce (and ZeRO-1's all-gather)
  std::int64_t optimizer_state_bytes = 0, peak_bytes = 0;  // per rank, the largest over the ranks
  std::vector<std::array<double, 3>> rank_p50_p99_max;     // per rank, seconds
  DdpStepStats ddp;                                        // per step (means), rank 0's
  std::int64_t steps = 0;
  double accuracy = 0, final_loss = 0;  // accuracy runs: held-out accuracy at the end, the last loss
  double compute_s = 0;  // per step, the slowest rank's forward + backward + optimizer (no data wait, no comm wait)
};

// One training run's arm: where and what it trains.
struct Arm {
  int world = 1;
  std::int64_t global_batch = 0, decode_cost = 0;
  bool communicate = true;  // false: DDP's no_sync (the paired trials)
  int measured_steps = 0;
  int zero = 0;
  GradCompression compression = GradCompression::none;
  std::uint64_t seed = 0;  // > 0: an accuracy run on that seed, evaluated on held-out data at the end
  AllreduceAlgorithm allreduce = AllreduceAlgorithm::native;
};

class Launch {
 public:
  Launch(const ScalingOptions& options, comm::MpiCommunicator& world, Plan plan);

  const ScalingOptions& o;
  comm::MpiCommunicator& world;
  const Plan plan;
  const int launched, rank;  // P, and this rank
  int cores = 1;
  std::string bind_arm;    // the binding of the run being recorded
  std::string bound_cpus;  // rank 0's CPUs as bound now
  std::string run_id;
  Ledger ledger{""};

  GradCompression compression0() const { return plan.compressions.front(); }
  int zero0() const { return plan.zeros.front(); }
  AllreduceAlgorithm allreduce0() const { return plan.allreduces.front(); }
  // An arm of the launch's settings: world `w` at `global_batch`, `measured` steps.
  Arm arm(int w, std::int64_t global_batch, std::int64_t decode_cost, bool communicate, int measured) const;
  // One training run on the first `arm.world` ranks; every launched rank calls it (the others wait
  // without spinning).
  Trained train(const Arm& arm);
  // Its ledger row (rank 0, unless --no-ledger).
  void record(const std::string& mode, const Arm& arm, const Trained& r) const;
  // Binds this rank ("core": its own physical core; "none": every CPU); returns the CPUs it has now.
  std::string bind(const std::string& how);
  // A barrier over the whole launch that sleeps instead of spinning: ranks outside the world being
  // measured must not take cores from the ranks inside it.
  void quiet_barrier() { world.sleeping_barrier(2e-3); }
  // What every row of the launch starts with: where it was measured, its kind, the run; and what
  // DDP runs over.
  RowHeader row_header(const char* kind) const;
  const comm::Communicator& ddp_world() const { return *ddp_world_; }
  void print_header() const;
  void print_ledger_line() const;  // where the rows went (rank 0, unless --no-ledger)

 private:
  std::unique_ptr<comm::Communicator> nccl_;
  comm::Communicator* ddp_world_ = nullptr;
  std::string hosts_;                                        // where the launched ranks run (comm::hosts_summary)
  std::map<int, std::unique_ptr<comm::Communicator>> subs_;  // one per world size: the first w ranks
  Topology topology_;
  std::string launcher_cpus_;
  Backend* host_ = nullptr;
  Environment env_;
};

int compare_arms(Launch& launch);     // --zero 0,1 or --grad-compress LIST
int compare_binding(Launch& launch);  // --bind-compare
int scaling_tables(Launch& launch);   // weak and strong scaling, the no_sync trials, the peer

}  // namespace trainlab::bench::scaling
