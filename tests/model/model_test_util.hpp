#pragma once
// Shared helpers of the model tests.
#include <cmath>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/model/stage.hpp"

namespace model_test {

// A small model that still has every feature: several heads, layers, microbatches.
inline conductor::config::Deck tiny_deck() {
  conductor::config::Deck d;
  d.model.vocab = 13;
  d.model.seq_len = 6;
  d.model.d_model = 8;
  d.model.n_heads = 2;
  d.model.n_layers = 3;
  d.model.mlp_ratio = 2;
  d.parallel.pipeline = 1;
  d.parallel.virtual_chunks = 1;
  d.parallel.microbatches = 3;
  d.parallel.microbatch_size = 2;
  d.run.steps = 5;
  return d;
}

// Runs one step's F and full backward on every microbatch in plain order through all held virtual stages
// (which must be all of them) and returns the step loss; leaves the gradients in the model.
inline double run_step(conductor::model::StageModel& m, int step) {
  const int S = m.num_virtual_stages();
  const std::size_t n = m.activation_elements();
  std::vector<std::vector<float>> act(S + 1, std::vector<float>(n)), grad(S + 1, std::vector<float>(n));
  m.begin_step(step);
  for (int mb = 0; mb < m.num_microbatches(); mb++) {
    for (int vs = 0; vs < S; vs++) {
      m.forward(vs, mb, vs == 0 ? nullptr : act[vs].data(), vs == S - 1 ? nullptr : act[vs + 1].data());
    }
    for (int vs = S - 1; vs >= 0; vs--) {
      m.backward_full(vs, mb, vs == S - 1 ? nullptr : grad[vs + 1].data(), vs == 0 ? nullptr : grad[vs].data());
    }
  }
  return m.step_loss();
}

inline std::vector<int> all_stages(int S) {
  std::vector<int> v(S);
  for (int i = 0; i < S; i++) v[i] = i;
  return v;
}

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); i++) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace model_test
