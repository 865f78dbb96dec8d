#pragma once
// The single-process reference trainer, the baseline the tests compare the pipelined runtime against.
#include <vector>

#include "conductor/plan/plan.hpp"

namespace conductor::model {

// Every virtual stage of the deck's split (parallel.pipeline x parallel.virtual) in one StageModel, microbatches
// in plain order (F then full backward per microbatch). Starts at step 0 or at the checkpoint in
// checkpoint.resume, runs until step `until_step` (-1: run.steps), writes checkpoints per checkpoint.path /
// checkpoint.every, and returns the loss of every step it ran.
std::vector<double> train_reference(const plan::Plan& plan, int until_step = -1);

}  // namespace conductor::model
