// One training run, alone or as one replica of a data-parallel world: the one place that decides
// which (started by an MPI launcher: DDP over the world; otherwise one process) and that builds a
// trainer over DDP. `trainlab train`, bench_scaling and the memory study all come through here.
//
//   return comm::run_training(config, [&](comm::Replica& replica) {
//     auto trainer = replica.trainer(config, model_task(config));
//     const TrainResult result = trainer->train(replica.rank() == 0 ? &std::cout : nullptr);
//     return 0;
//   });
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/ddp.h"
#include "engine/train/config.h"
#include "engine/train/task.h"
#include "engine/train/trainer.h"

namespace trainlab::comm {

// Started by an MPI launcher (mpirun, srun with PMI/PMIx): the launcher sets its variables.
bool launched_by_mpi();

// This process's part in a run: alone, or one rank of a DDP world over a communicator (the world,
// or a sub-communicator as bench_scaling's worlds are).
class Replica {
 public:
  Replica() = default;  // alone
  explicit Replica(Communicator& comm) : comm_(&comm) {}
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;
  ~Replica();

  int rank() const { return comm_ != nullptr ? comm_->rank() : 0; }
  int world_size() const { return comm_ != nullptr ? comm_->size() : 1; }
  bool distributed() const { return comm_ != nullptr; }
  // A trainer for `config` on `task`: alone, or over a DDP of its own on this replica's world with
  // config.parallel (each trainer gets a fresh DDP, kept as long as this replica).
  std::unique_ptr<Trainer> trainer(const TrainConfig& config, TrainTask task);
  // The DDP of the latest trainer (null alone, or before the first).
  Ddp* ddp() { return ddps_.empty() ? nullptr : ddps_.back().get(); }
  // Every rank's value, in rank order (a collective over the world; alone: the value). Needs a
  // trainer made first (its DDP gathers).
  std::vector<double> gather(double value);
  std::vector<std::int64_t> gather(std::int64_t value);

 private:
  Communicator* comm_ = nullptr;
  std::vector<std::unique_ptr<Ddp>> ddps_;
};

// Runs `body` once in this process: alone, or, started by an MPI launcher, as one replica of a DDP
// world over config.parallel.comm (with config.parallel.comm_timeout), the ranks meeting at a
// barrier after it. Returns body's status. Alone, errors propagate; in a world, an Error on any rank
// ends the whole job with "trainlab: error on rank R: ..." and exit status 3 for a diverged run
// (TrainingDiverged), 2 for any other.
int run_training(const TrainConfig& config, const std::function<int(Replica&)>& body);

}  // namespace trainlab::comm
