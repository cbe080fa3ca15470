// Catch2 under MPI: every rank runs every test; the job fails if any rank fails (Catch2's
// implementation is in catch_impl.cpp).
#include "catch_session.h"

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  trainlab::comm::MpiSession session(&argc, &argv);
  int failed = run_catch_session(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
