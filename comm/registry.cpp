// The communicator registry: one entry per implementation, the way backends/registry.cpp lists
// the backends. A new communicator is a class deriving from Communicator (comm/communicator.h) in
// its own file, plus one entry here. An entry this build lacks stays listed with the reason, so
// that asking for it says how to get it rather than "unknown".
#include <string>
#include <vector>

#include "backends/error.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#ifdef TRAINLAB_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace trainlab::comm {

namespace {
struct CommunicatorEntry {
  const char* name;
  const char* description;
  std::unique_ptr<Communicator> (*world)();  // null: not in this build
  const char* absent;                        // why not, and how to get it
};

const std::vector<CommunicatorEntry>& entries() {
  static const std::vector<CommunicatorEntry> list = {
      {"mpi", "MPI point-to-point and collectives on host memory (Open MPI)",
       []() -> std::unique_ptr<Communicator> { return MpiCommunicator::world(); }, nullptr},
#ifdef TRAINLAB_HAVE_NCCL
      {"nccl", "NCCL on device memory, one GPU per rank, bootstrapped over MPI",
       []() -> std::unique_ptr<Communicator> { return NcclCommunicator::world(); }, nullptr},
#else
      {"nccl", "NCCL on device memory, one GPU per rank, bootstrapped over MPI", nullptr,
       "it is compiled with CUDA (configure with --preset cuda, or -DTRAINLAB_CUDA=ON, on a machine with the CUDA "
       "toolkit and NCCL)"},
#endif
  };
  return list;
}
}  // namespace

std::vector<std::string> communicator_names() {
  std::vector<std::string> names;
  for (const auto& e : entries())
    if (e.world != nullptr) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Communicator> make_world(const std::string& kind) {
  std::string allowed;
  for (const auto& name : communicator_names()) allowed += (allowed.empty() ? "" : ", ") + name;
  for (const auto& e : entries()) {
    if (kind != e.name) continue;
    if (e.world == nullptr)
      throw Error("communicator '" + kind + "' is not in this build: " + e.absent + "; allowed here: " + allowed);
    return e.world();
  }
  throw Error("unknown communicator '" + kind + "' (allowed: " + allowed + ")");
}

}  // namespace trainlab::comm
