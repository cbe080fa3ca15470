#include "comm/run_training.h"

#include <fmt/format.h>

#include <cstdlib>

#include "comm/mpi_communicator.h"

namespace trainlab::comm {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Replica::~Replica() = default;

std::unique_ptr<Trainer> Replica::trainer(const TrainConfig& config, TrainTask task) {
  if (comm_ == nullptr) return std::make_unique<Trainer>(config, std::move(task));
  ddps_.push_back(std::make_unique<Ddp>(*comm_, config.parallel));
  return std::make_unique<Trainer>(config, std::move(task), ddps_.back().get());
}

std::vector<double> Replica::gather(double value) {
  if (comm_ == nullptr) return {value};
  TL_CHECK(ddp() != nullptr, "Replica::gather: make a trainer first (its DDP gathers)");
  return ddp()->gather(value);
}

std::vector<std::int64_t> Replica::gather(std::int64_t value) {
  if (comm_ == nullptr) return {value};
  TL_CHECK(ddp() != nullptr, "Replica::gather: make a trainer first (its DDP gathers)");
  return ddp()->gather(value);
}

int run_training(const TrainConfig& config, const std::function<int(Replica&)>& body) {
  if (!launched_by_mpi()) {
    Replica alone;
    return body(alone);
  }
  // One replica per rank; an error on any rank ends the whole job with the message.
  MpiSession session(nullptr, nullptr);
  auto bootstrap = MpiCommunicator::world();
  try {
    auto world = make_world(comm_backend_name(config.parallel.comm));
    world->set_timeout(config.parallel.comm_timeout);
    int status = 0;
    {
      Replica replica(*world);
      status = body(replica);
    }
    world->barrier();
    return status;
  } catch (const TrainingDiverged& e) {
    bootstrap->abort(fmt::format("trainlab: error on rank {}: {}", bootstrap->rank(), e.what()), 3);
  } catch (const Error& e) {
    bootstrap->abort(fmt::format("trainlab: error on rank {}: {}", bootstrap->rank(), e.what()), 2);
  }
}

}  // namespace trainlab::comm
