#include "conductor/runtime/stop_signal.hpp"

#include <unistd.h>

#include <csignal>
#include <initializer_list>

namespace conductor::runtime {

namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_count = 0;
volatile std::sig_atomic_t g_steps_over = 0;

// Async-signal-safe: only sig_atomic_t stores, write(2), signal() and raise().
extern "C" void on_stop_signal(int sig) {
  if (g_count == 0) {
    g_signal = sig;
    g_count = 1;
    return;
  }
  g_count = g_count + 1;
  if (g_count == 2) {
    if (g_steps_over) return;
    // What `timeout`, a double Ctrl-C or mpirun forwarding its own signal send: keep the graceful stop.
    static const char note[] =
        "conductor: stop already requested; finishing the current step (a third signal aborts)\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, note, sizeof note - 1);
    return;
  }
  std::signal(sig, SIG_DFL);  // the third: the user insists, end now
  std::raise(sig);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  // TERM and INT (scancel, Ctrl-C, the launcher); HUP (a closed terminal); USR1 and USR2, which Slurm users ask for
  // before a time limit (`--signal=USR1@120`) and mpirun forwards to the ranks. Unhandled, each killed the ranks with
  // no checkpoint of the step and a trace left open.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
void steps_over() { g_steps_over = 1; }
int stop_signal_number() { return static_cast<int>(g_signal); }

}  // namespace conductor::runtime
