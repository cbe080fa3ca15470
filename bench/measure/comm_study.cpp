#include "bench/measure/comm_study.h"

#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "comm/mpi_communicator.h"

namespace trainlab::bench {

CommStudyBase comm_study_base(comm::Communicator& world) {
  CommStudyBase base;
  if (world.rank() == 0) base.copy_rate_gbps = memcpy_gbps();
  world.broadcast(&base.copy_rate_gbps, sizeof base.copy_rate_gbps, 0);
  Backend& host = get_backend(default_backend_name());
  host.set_num_threads(1);
  base.env = current_environment(host).to_json();
  base.env["versions"]["mpi"] = comm::mpi_library_version();
  return base;
}

}  // namespace trainlab::bench
