#pragma once
// The single-process reference trainer, the baseline the tests compare the pipelined runtime against.
#include <vector>

#include "conductor/plan/plan.hpp"

namespace conductor::model {

// Every virtual stage of the deck's split (parallel.pipeline x parallel.virtual) in one StageModel, microbatches
// in plain order (F then full backward per microbatch). Starts at step 0 or at the checkpoint in
// checkpoint.resume, runs until step `until_step` (-1: run.steps), writes checkpoints per checkpoint.path /
// checkpoint.every, and returns the loss of every step it ran.
// valid_losses (when given) receives the validation loss after each step where eval_due (data.hpp).
std::vector<double> train_reference(const plan::Plan& plan, int until_step = -1,
                                    std::vector<double>* valid_losses = nullptr);

class StageModel;
// The validation loss of a model holding every virtual stage: the mean over validation batches 0..batches-1 of
// each batch's mean token loss, summed in batch order (the runtime's pipelined evaluation gives the same bits).
double reference_eval_loss(StageModel& model, int batches);

}  // namespace conductor::model
