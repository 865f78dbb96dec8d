#pragma once
// The fault tests' hooks, read from the environment in one place (tests/faults):
// - CONDUCTOR_INJECT_FAILURE=RANK:STEP[:kill|:hang-help|:hang-checkpoint|:hang-end|:hang-setup]: that rank throws
//   at the start of that step (training), dies by SIGKILL there, stops (SIGSTOP) when it starts computing real
//   slices for a peer (migration), stops once it has written its files of checkpoint step STEP (checkpointing: a
//   file system that hangs), stops at the end of a run of STEP steps, its results written (training), or stops
//   in its set-up, its model and data files loaded (training; STEP 0);
// - CONDUCTOR_INJECT_NAN / CONDUCTOR_INJECT_CLIP=RANK:STEP[,RANK:STEP...]: that rank's gradients read as NaN, or its
//   sum of squares 1e30 larger (numerics);
// - CONDUCTOR_INJECT_NAN_WEIGHTS=RANK:STEP[,...]: after that step's update one of that rank's weights is NaN (the
//   checkpoint's guard against non-finite state, training).
namespace conductor::runtime {

enum class InjectedFailure { None, Throw, Kill, HangHelp, HangCheckpoint, HangEnd, HangSetup };

// CONDUCTOR_INJECT_FAILURE's instruction for this rank and step.
InjectedFailure injected_failure(int rank, int step);

// Whether the list in `variable` names this rank and step.
bool injected_at(const char* variable, int rank, int step);

}  // namespace conductor::runtime
