#include "conductor/runtime/stop_signal.hpp"

#include <csignal>

namespace conductor::runtime {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal_number() { return static_cast<int>(g_signal); }

}  // namespace conductor::runtime
