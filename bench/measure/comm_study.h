// What the communication studies (bench_allreduce, bench_buckets) share at set-up: the
// single-core memcpy rate every busbw is compared with (measured on rank 0 while the others wait,
// then given to every rank) and the ledger environment of a host run (the default CPU backend on
// one thread) with the MPI library's version.
#pragma once

#include "bench/measure/ledger.h"
#include "comm/communicator.h"

namespace trainlab::bench {

struct CommStudyBase {
  double copy_rate_gbps = 0;
  json env;
};
CommStudyBase comm_study_base(comm::Communicator& world);

}  // namespace trainlab::bench
