// The optimizer step of a StageModel: learning-rate schedule, global-norm clipping, AdamW over every held tensor.
#include "conductor/model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "conductor/model/adamw.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"

namespace conductor::model {

double learning_rate(const plan::Optim& o, int step) {
  const double lr_min = o.lr * o.lr_min_ratio;
  if (step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  const int decay = o.decay_steps;
  if (decay <= o.warmup_steps) return o.lr;
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / (decay - o.warmup_steps));
  return lr_min + 0.5 * (o.lr - lr_min) * (1.0 + std::cos(std::numbers::pi * progress));
}

double clip_scale(const plan::Optim& optim, double global_grad_norm) {
  const double clip = optim.grad_clip;
  return clip > 0 ? std::min(1.0, clip / (global_grad_norm + 1e-6)) : 1.0;
}

std::vector<std::vector<double>> StageModel::grad_sq_norms() const {
  std::vector<const float*> xs;
  std::vector<std::size_t> ns;
  for (const auto& s : stages_) {
    for (const auto& t : s->tensors) {
      xs.push_back(s->grads.f() + t.offset);
      ns.push_back(t.numel);
    }
  }
  std::vector<double> each(xs.size(), 0.0);
  sum_squares_each(each.data(), xs.data(), ns.data(), static_cast<int>(xs.size()), *backend_);  // one launch
  std::vector<std::vector<double>> rows(static_cast<std::size_t>(num_vs_));
  std::size_t k = 0;
  for (const auto& s : stages_) {
    auto& row = rows[static_cast<std::size_t>(s->vs)];
    row.assign(each.begin() + static_cast<std::ptrdiff_t>(k),
               each.begin() + static_cast<std::ptrdiff_t>(k + s->tensors.size()));
    k += s->tensors.size();
  }
  return rows;
}

double StageModel::local_grad_sq_norm() const {
  double total = 0.0;
  for (const auto& row : grad_sq_norms()) {
    for (double v : row) total += v;  // (virtual stage, tensor) order: the same sum on every backend and rank count
  }
  return total;
}

bool clipping_applies(const plan::Optim& optim, double global_grad_norm) {
  return static_cast<float>(clip_scale(optim, global_grad_norm)) != 1.0f;  // the scale the kernel multiplies by
}

void StageModel::optimizer_step(double global_grad_norm, int step) {
  adamw_all(static_cast<float>(clip_scale(plan_.optim, global_grad_norm)), step);
}

void StageModel::optimizer_step_unclipped(int step) { adamw_all(1.0f, step); }

void StageModel::adamw_all(float grad_scale, int step) {
  const auto& o = plan_.optim;
  AdamWStep update;
  update.lr = static_cast<float>(learning_rate(plan_.optim, step));
  update.beta1 = static_cast<float>(o.beta1);
  update.beta2 = static_cast<float>(o.beta2);
  update.eps = static_cast<float>(o.eps);
  update.grad_scale = grad_scale;
  update.t = step + 1;
  for (auto& s : stages_) {
    for (const auto& t : s->tensors) {
      update.weight_decay = t.decay ? static_cast<float>(o.weight_decay) : 0.0f;
      adamw_update(s->params.f() + t.offset, s->adam_m.f() + t.offset, s->adam_v.f() + t.offset,
                   s->grads.f() + t.offset, t.numel, update, *backend_);
    }
  }
}

// AdamW is not invertible in floating point, so undoing an update needs the state from before it: weights, m
// and v (the step count is an argument). The gradients too: with overlapping steps the next step's first attempt
// has zeroed and refilled them by the time the check says the update must be redone.
std::size_t StageModel::keep_backup() {
  if (backup_.empty()) {
    for (const auto& s : stages_) backup_.emplace_back(*backend_, 4 * s->n_params * sizeof(float));
  }
  std::size_t bytes = 0;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const VStage& s = *stages_[k];
    const std::size_t n = s.n_params;
    backend_->copy(backup_[k].f(), s.params.f(), n * sizeof(float));
    backend_->copy(backup_[k].f() + n, s.adam_m.f(), n * sizeof(float));
    backend_->copy(backup_[k].f() + 2 * n, s.adam_v.f(), n * sizeof(float));
    backend_->copy(backup_[k].f() + 3 * n, s.grads.f(), n * sizeof(float));
    bytes += backup_[k].bytes();
  }
  return bytes;
}

void StageModel::restore_backup() {
  if (backup_.size() != stages_.size()) throw Error("model: restore_backup() without keep_backup()");
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    VStage& s = *stages_[k];
    const std::size_t n = s.n_params;
    backend_->copy(s.params.f(), backup_[k].f(), n * sizeof(float));
    backend_->copy(s.adam_m.f(), backup_[k].f() + n, n * sizeof(float));
    backend_->copy(s.adam_v.f(), backup_[k].f() + 2 * n, n * sizeof(float));
    backend_->copy(s.grads.f(), backup_[k].f() + 3 * n, n * sizeof(float));
  }
}

}  // namespace conductor::model
