#include "backends/device_selection.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "backends/error.h"

namespace trainlab {

namespace {

// A launcher variable's value as a non-negative integer; anything else throws naming it.
int parse_count(const char* name, const char* value) {
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || parsed < 0 || parsed > 1'000'000) {
    throw Error(std::string("device selection: ") + name + "=" + quote_value(value) +
                " is not a non-negative integer (it is the launcher's local rank or size)");
  }
  return static_cast<int>(parsed);
}

}  // namespace

LocalPlacement placement_from_environment(const GetEnv& getenv) {
  struct Pair {
    const char* rank;
    const char* size;
  };
  static const std::vector<Pair> launchers = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                              {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
                                              {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
                                              {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}};
  for (const Pair& pair : launchers) {
    const char* rank = getenv(pair.rank);
    if (rank == nullptr || *rank == '\0') continue;
    LocalPlacement placement;
    placement.local_rank = parse_count(pair.rank, rank);
    const char* size = getenv(pair.size);
    // Slurm writes SLURM_NTASKS_PER_NODE as "2" or "2(x3)"; only the plain form is read, else the
    // size is unknown and taken as at least rank + 1.
    placement.local_size = placement.local_rank + 1;
    if (size != nullptr && *size != '\0') {
      const std::string text = size;
      if (text.find('(') == std::string::npos && text.find(',') == std::string::npos) {
        placement.local_size = parse_count(pair.size, size);
      }
    }
    if (placement.local_rank >= placement.local_size) {
      throw Error(std::string("device selection: ") + pair.rank + "=" + rank + " is not below " + pair.size + "=" +
                  (size != nullptr ? size : "?") + " (a local rank must be in [0, local size))");
    }
    placement.source = pair.rank;
    return placement;
  }
  return {};
}

LocalPlacement placement_from_environment() {
  return placement_from_environment([](const char* name) { return std::getenv(name); });
}

DeviceChoice choose_device(const LocalPlacement& placement, int device_count, const char* override_value,
                           const char* visible_devices) {
  TL_CHECK(device_count > 0, "device selection: this machine has no GPU (device count " + std::to_string(device_count) +
                                 "); use a CPU backend and --comm mpi");
  if (override_value != nullptr && *override_value != '\0') {
    char* end = nullptr;
    const long device = std::strtol(override_value, &end, 10);
    if (end == override_value || *end != '\0' || device < 0 || device >= device_count) {
      throw Error("device selection: TRAINLAB_CUDA_DEVICE=" + quote_value(override_value) +
                  " is not a GPU of this machine (allowed: 0.." + std::to_string(device_count - 1) + ")");
    }
    return {static_cast<int>(device), "TRAINLAB_CUDA_DEVICE=" + std::string(override_value)};
  }
  const std::string rank_text = "local rank " + std::to_string(placement.local_rank) + " of " +
                                std::to_string(placement.local_size) + " (" + placement.source + ")";
  if (placement.local_size > device_count && visible_devices != nullptr && *visible_devices != '\0') {
    // Each rank was given its own GPUs by the launcher: they are all this rank's.
    const int device = placement.local_rank % device_count;
    return {device, rank_text + "; CUDA_VISIBLE_DEVICES=" + std::string(visible_devices) + " shows this rank " +
                        std::to_string(device_count) + " GPU(s), so it takes visible device " + std::to_string(device)};
  }
  if (placement.local_size > device_count) {
    throw Error("device selection: " + std::to_string(placement.local_size) + " ranks run on this host (" +
                placement.source + ") but it has " + std::to_string(device_count) +
                " GPU(s): one GPU per rank, so at most " + std::to_string(device_count) +
                " rank(s) per host (or set TRAINLAB_CUDA_DEVICE explicitly, or give each rank its own GPUs "
                "through CUDA_VISIBLE_DEVICES)");
  }
  return {placement.local_rank, rank_text};
}

int DeviceClaim::claim(const DeviceChoice& choice, const std::string& who) {
  std::lock_guard lock(mutex_);
  if (!choice_) {
    choice_ = choice;
    who_ = who;
    return choice.device;
  }
  if (choice_->device != choice.device) {
    throw Error("device selection: the " + who_ + " runs on GPU " + std::to_string(choice_->device) + " (" +
                choice_->reason + ") but the " + who + " chose GPU " + std::to_string(choice.device) + " (" +
                choice.reason + "); one process uses one GPU: launch with mpirun (scripts/mpirun), which sets the " +
                "local rank, or set TRAINLAB_CUDA_DEVICE the same for both");
  }
  return choice_->device;
}

std::optional<DeviceChoice> DeviceClaim::claimed() const {
  std::lock_guard lock(mutex_);
  return choice_;
}

std::string DeviceClaim::claimant() const {
  std::lock_guard lock(mutex_);
  return who_;
}

DeviceClaim& process_device() {
  static DeviceClaim claim;
  return claim;
}

std::string describe_process_placement() {
  std::string where;
  try {
    const LocalPlacement placement = placement_from_environment();
    where = "local rank " + std::to_string(placement.local_rank) + " of " + std::to_string(placement.local_size) +
            " (" + placement.source + ")";
  } catch (const Error& e) {
    where = e.what();
  }
  const auto gpu = process_device().claimed();
  if (!gpu) return where + "; no GPU";
  return where + "; GPU " + std::to_string(gpu->device) + " (" + gpu->reason + ", claimed by the " +
         process_device().claimant() + ")";
}

}  // namespace trainlab
