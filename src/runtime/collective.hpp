#pragma once
// Private to runtime: run a piece of work on every rank so that any rank's failure ends all ranks together with
// that rank's message (training.cpp's step loop and checkpointing.cpp share this rule).
#include <exception>
#include <string>

#include <mpi.h>

#include "conductor/runtime/watchdog.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

// Runs f(); false with its message and exit code when it threw (CollectiveExit passes through: every rank
// already agreed on it).
template <class F>
bool run_caught(F&& f, int exit_code_on_input_error, std::string& message, int& code) {
  code = kExitFailure;
  try {
    f();
    return true;
  } catch (const CollectiveExit&) {
    throw;  // already agreed on and reported by every rank
  } catch (const InputError& e) {
    message = e.what();
    code = exit_code_on_input_error;
  } catch (const std::exception& e) {
    message = e.what();
  }
  return false;
}

template <class F>
void collectively(MPI_Comm comm, int exit_code_on_input_error, F&& f) {
  std::string message;
  int code = kExitFailure;
  const bool ok = run_caught(f, exit_code_on_input_error, message, code);
  mpi::check_all(ok, message, code, comm);
}

// The same with the agreement under the watchdog: a rank that never gets there (stopped, or hung in a file
// system) ends the run after runtime.watchdog_s with a message naming `what`, rather than leaving every other
// rank blocked in MPI for ever.
template <class F>
void collectively(MPI_Comm comm, int exit_code_on_input_error, const Watchdog& watchdog, const std::string& what,
                  F&& f) {
  std::string message;
  int code = kExitFailure;
  const bool ok = run_caught(f, exit_code_on_input_error, message, code);
  watched_check_all(watchdog, ok, message, code, comm, what);
}

}  // namespace conductor::runtime
