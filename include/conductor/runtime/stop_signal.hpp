#pragma once
// SIGTERM (Slurm's time limit, scancel) and SIGINT ask the run to stop after the current step: the trace is
// flushed, a checkpoint written if configured, and the job exits non-zero. Ranks agree on stopping at the end
// of each step (any rank signalled stops all), so nobody waits for a peer that left.
namespace conductor::runtime {

void install_stop_handlers();
bool stop_requested();     // this process got SIGTERM/SIGINT
int stop_signal_number();  // which one (0 if none)
// The run's steps are over (it writes its results): a second signal, such as the launcher ending the job's other
// ranks once one exited with the stop's status, is no news and says nothing (it said "finishing the current
// step" after the last one). A third still ends the process.
void steps_over();

}  // namespace conductor::runtime
