// Stop signals (runtime/stop_signal.hpp): the first asks for a stop, the second says the stop is under way
// unless the steps are over, the third ends the process. Each case runs in a child whose stderr is a pipe.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "conductor/runtime/stop_signal.hpp"

using namespace conductor::runtime;

namespace {

struct Child {
  int status = 0;
  std::string err;
};

// Runs `body` in a child with stderr on a pipe; its exit status and what it wrote there.
template <class F>
Child in_child(F&& body) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  Child c;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) c.err.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  waitpid(pid, &c.status, 0);
  return c;
}

}  // namespace

TEST(StopSignal, SecondSignalSaysTheStopIsUnderWay) {
  const Child c = in_child([] {
    install_stop_handlers();
    std::raise(SIGTERM);
    std::raise(SIGTERM);
    if (!stop_requested() || stop_signal_number() != SIGTERM) _exit(2);
  });
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.status;
  EXPECT_EQ(c.err, "conductor: stop already requested; finishing the current step (a third signal aborts)\n");
}

// The launcher ends a job's other ranks with SIGTERM once one exited with the stop's status: after the steps, a
// rank signalled then said "finishing the current step" below its results.
TEST(StopSignal, SecondSignalAfterTheStepsSaysNothingAndTheThirdEnds) {
  const Child quiet = in_child([] {
    install_stop_handlers();
    std::raise(SIGTERM);
    steps_over();
    std::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFEXITED(quiet.status) && WEXITSTATUS(quiet.status) == 0) << quiet.status;
  EXPECT_EQ(quiet.err, "");
  const Child ended = in_child([] {
    install_stop_handlers();
    steps_over();
    for (int i = 0; i < 3; ++i) std::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(ended.status)) << ended.status;
  EXPECT_EQ(WTERMSIG(ended.status), SIGTERM);
}
