#pragma once
// Private to runtime: run a piece of work on every rank so that any rank's failure ends all ranks together with
// that rank's message (training.cpp's step loop and checkpointing.cpp share this rule).
#include <exception>
#include <string>

#include <mpi.h>

#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

template <class F>
void collectively(MPI_Comm comm, int exit_code_on_input_error, F&& f) {
  bool ok = true;
  std::string message;
  int code = kExitFailure;
  try {
    f();
  } catch (const CollectiveExit&) {
    throw;  // already agreed on and reported by every rank
  } catch (const InputError& e) {
    ok = false;
    message = e.what();
    code = exit_code_on_input_error;
  } catch (const std::exception& e) {
    ok = false;
    message = e.what();
  }
  mpi::check_all(ok, message, code, comm);
}

}  // namespace conductor::runtime
