// The single-process reference trainer (reference.hpp).
#include "conductor/model/reference.hpp"

#include <cmath>

#include "conductor/model/checkpoint.hpp"
#include "conductor/model/stage.hpp"

namespace conductor::model {

namespace {

// One step's forwards and full backwards, microbatch by microbatch, through every virtual stage in order;
// act / grad hold the tensors passed between virtual stages.
void run_microbatches(StageModel& model, std::vector<std::vector<float>>& act, std::vector<std::vector<float>>& grad) {
  const int S = model.num_virtual_stages();
  for (int mb = 0; mb < model.num_microbatches(); mb++) {
    for (int vs = 0; vs < S; vs++) {
      model.forward(vs, mb, vs == 0 ? nullptr : act[vs].data(), vs == S - 1 ? nullptr : act[vs + 1].data());
    }
    for (int vs = S - 1; vs >= 0; vs--) {
      model.backward_full(vs, mb, vs == S - 1 ? nullptr : grad[vs + 1].data(), vs == 0 ? nullptr : grad[vs].data());
    }
  }
}

}  // namespace

double reference_eval_loss(StageModel& model, int batches) {
  const int S = model.num_virtual_stages();
  std::vector<std::vector<float>> act(S + 1, std::vector<float>(model.activation_elements()));
  double sum = 0.0;
  for (int b = 0; b < batches; b++) {
    for (int vs = 0; vs < S; vs++) {
      const double loss =
          model.eval_forward(vs, b, vs == 0 ? nullptr : act[vs].data(), vs == S - 1 ? nullptr : act[vs + 1].data());
      if (vs == S - 1) sum += loss;
    }
  }
  return sum / batches;
}

std::vector<double> train_reference(const plan::Plan& plan, int until_step, std::vector<double>* valid_losses) {
  const int S = plan.pipeline.p * plan.pipeline.v;
  std::vector<int> all(S);
  for (int i = 0; i < S; i++) all[i] = i;
  StageModel model(plan, all, S);
  int step = 0;
  if (!plan.checkpoint.resume.empty()) step = model.load_checkpoint(resolve_checkpoint(plan.checkpoint.resume));
  const int last = until_step < 0 ? plan.run.steps : until_step;
  const std::size_t n = model.activation_elements();
  std::vector<std::vector<float>> act(S + 1, std::vector<float>(n)), grad(S + 1, std::vector<float>(n));
  std::vector<double> losses;
  for (; step < last; step++) {
    model.begin_step(step);
    run_microbatches(model, act, grad);
    model.optimizer_step(std::sqrt(model.local_grad_sq_norm()), step);
    losses.push_back(model.step_loss());
    if (valid_losses && eval_due(plan, step)) valid_losses->push_back(reference_eval_loss(model, plan.eval.batches));
    const int done = step + 1;
    if (!plan.checkpoint.path.empty() &&
        ((plan.checkpoint.every > 0 && done % plan.checkpoint.every == 0) || done == last)) {
      write_checkpoint(model, plan.checkpoint.path, done, plan.checkpoint.keep, plan.pipeline.p, plan.pipeline.v);
    }
  }
  return losses;
}

}  // namespace conductor::model
