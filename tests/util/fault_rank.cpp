// A 4-rank program in which one rank fails while the others wait in a collective. Used by
// test_fault.py to prove that a failure on any rank ends every rank promptly with a non-zero exit.
//   fault_rank one R         rank R raises an error while the others block in MPI_Barrier (abort path)
//   fault_rank collective R  rank R reports a failure through mpi::check_all (collective path)
//   fault_rank none          nobody fails (the control: exit 0)
#include <cstdlib>
#include <string>

#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

using namespace conductor;

int main(int argc, char** argv) {
  mpi::Session session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "none";
  const int bad_rank = argc > 2 ? std::atoi(argv[2]) : -1;
  try {
    if (mode == "one") {
      if (session.rank() == bad_rank) throw Error("injected failure on rank " + std::to_string(bad_rank));
      MPI_Barrier(MPI_COMM_WORLD);  // would hang forever if the failing rank did not take the job down
    } else if (mode == "collective") {
      const bool ok = session.rank() != bad_rank;
      mpi::check_all(ok, "injected collective failure on rank " + std::to_string(bad_rank), 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    log::info("fault_rank: all ranks finished");
    return 0;
  } catch (const CollectiveExit& e) {
    return e.exit_code();
  } catch (const Error& e) {
    mpi::abort_all(e.what(), e.exit_code());
  }
}
