// One device per process, chosen once. A process launched as one of several ranks on a host uses
// the GPU of its index among them (its local rank), for the backend and the communicator alike;
// TRAINLAB_CUDA_DEVICE is an explicit override. More local ranks than GPUs is an error with the
// counts (nothing here lets two ranks share a GPU behind the user's back).
//
// The local rank comes from the launcher's environment (Open MPI, MPICH/Hydra, Slurm, torchrun),
// or from MPI itself (MPI_Comm_split_type, when the communicator is built); whoever chooses first
// claims the device for the process, and a later choice that differs (the cuda backend picked GPU
// 0 but the NCCL communicator's local rank says GPU 1) is an error naming both and why each chose.
// The logic is plain functions over injected values, so tests run it without a GPU or a launcher.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace trainlab {

// Where this process sits among the processes on its host.
struct LocalPlacement {
  int local_rank = 0;
  int local_size = 1;
  std::string source = "one process (no launcher variables)";  // where the numbers came from
};

using GetEnv = std::function<const char*(const char*)>;

// From the launcher's variables, first found wins: OMPI_COMM_WORLD_LOCAL_RANK/_SIZE (Open MPI),
// MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH's Hydra), SLURM_LOCALID/SLURM_NTASKS_PER_NODE, then
// LOCAL_RANK/LOCAL_WORLD_SIZE (torchrun). None set: one process. A malformed value (not a number,
// rank outside [0, size)) throws naming the variable and its value.
LocalPlacement placement_from_environment(const GetEnv& getenv);
LocalPlacement placement_from_environment();  // this process's environment

struct DeviceChoice {
  int device = 0;
  std::string reason;  // "local rank 1 of 2 (OMPI_COMM_WORLD_LOCAL_RANK)" or "TRAINLAB_CUDA_DEVICE=3"
};

// The GPU for a process at `placement` on a host with `device_count` GPUs (the ones this process
// sees). `override_value` is TRAINLAB_CUDA_DEVICE's value (null when unset): it must be an index in
// [0, device_count). Without it, local_size > device_count is an error with the counts, unless
// `visible_devices` (CUDA_VISIBLE_DEVICES's value, null when unset) is set: then the launcher gave
// each rank its own GPUs (Slurm's --gpus-per-task=1 shows each rank one), and the rank takes
// visible device local_rank modulo their count, saying so.
DeviceChoice choose_device(const LocalPlacement& placement, int device_count, const char* override_value,
                           const char* visible_devices = nullptr);

// The process's one device: the first claim sets it; a claim of another device throws naming both
// claimants and their reasons. Tests make their own; the process has one (process_device()).
class DeviceClaim {
 public:
  // Returns the claimed device (the same as choice.device, or it throws).
  int claim(const DeviceChoice& choice, const std::string& who);
  std::optional<DeviceChoice> claimed() const;
  std::string claimant() const;

 private:
  mutable std::mutex mutex_;
  std::optional<DeviceChoice> choice_;
  std::string who_;
};
DeviceClaim& process_device();

// This process's placement and GPU, for ledger rows and traces: "local rank 0 of 2
// (OMPI_COMM_WORLD_LOCAL_RANK); GPU 0 (local rank 0 of 2 (...), claimed by the cuda backend)", or
// "...; no GPU" when nothing has claimed one. Malformed launcher variables are named, not thrown.
std::string describe_process_placement();

}  // namespace trainlab
