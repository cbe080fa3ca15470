// Catch2 under MPI: every rank runs every test; the job fails if any rank fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  trainlab::comm::MpiSession session(&argc, &argv);
  int failed = Catch::Session().run(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
