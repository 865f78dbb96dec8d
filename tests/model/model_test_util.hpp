#pragma once
// Shared helpers of the model tests.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
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

// `deck` over two pipeline stages with migration on for `units` in `groups` groups, every group movable.
inline conductor::plan::Plan grouped_plan(const std::vector<std::string>& units, int groups, int n_heads,
                                          conductor::config::Deck deck = tiny_deck()) {
  deck.model.n_heads = n_heads;
  deck.parallel.pipeline = 2;
  deck.migration.enabled = true;
  deck.migration.units = units;
  deck.migration.slices = groups;
  deck.migration.max_fraction = 1;
  return conductor::config::resolve(deck);
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

// An exchange that gives the request to `helper` at once (its F help if forward, else its B help) and checks the
// answer's size; on_request(request) sees each request first.
template <class OnRequest>
conductor::model::StageModel::GroupExchange helper_exchange(const conductor::model::StageModel& helper, bool forward,
                                                            int k, OnRequest on_request, const std::string& what) {
  auto input = std::make_shared<std::vector<float>>();
  auto floats = std::make_shared<std::size_t>(0);
  conductor::model::StageModel::GroupExchange e;
  e.send = [input, floats](std::vector<float> in, std::size_t answer) {
    *input = std::move(in);
    *floats = answer;
  };
  e.receive = [&helper, input, floats, forward, k, on_request, what] {
    on_request(*input);
    std::vector<float> a = forward ? helper.forward_help(k, *input) : helper.backward_input_help(k, *input);
    EXPECT_EQ(a.size(), *floats) << what;
    return a;
  };
  return e;
}

// After a step of `give` (virtual stages 0 and 1, whatever was given away): its loss and gradients are `keep`'s
// plain step's bit for bit; then both models step their optimizers.
inline void expect_step_matches(conductor::model::StageModel& give, conductor::model::StageModel& keep, int step,
                                const std::string& what) {
  using conductor::model::Buffer;
  EXPECT_EQ(give.step_loss(), run_step(keep, step)) << what << ", step " << step;
  for (int vs : {0, 1}) EXPECT_EQ(give.read(vs, Buffer::Grads), keep.read(vs, Buffer::Grads)) << what << vs;
  keep.optimizer_step(std::sqrt(keep.local_grad_sq_norm()), step);
  give.optimizer_step(std::sqrt(give.local_grad_sq_norm()), step);
}

// One step of `give` over virtual stages 0 and 1 in plain order whose W of (vs, mb) gives groups_of(vs, mb) groups
// to `helper` (0: computes them all), the answers landing after every W of the step, last first (held back out of
// order), checked against `keep` by expect_step_matches.
template <class GroupsOf>
void expect_weight_help_matches(conductor::model::StageModel& give, conductor::model::StageModel& keep,
                                const conductor::model::StageModel& helper, int step, GroupsOf groups_of,
                                const std::string& what) {
  const std::size_t n = keep.activation_elements();
  const int mbs = give.num_microbatches();
  std::vector<std::vector<float>> act(mbs, std::vector<float>(n)), grad(mbs, std::vector<float>(n));
  give.begin_step(step);
  std::vector<std::tuple<int, int, std::vector<float>>> answers;  // (vs, mb, the helper's answer)
  for (int mb = 0; mb < mbs; ++mb) {
    give.forward(0, mb, nullptr, act[mb].data());
    give.forward(1, mb, act[mb].data(), nullptr);
    for (int vs : {1, 0}) {
      give.backward_input(vs, mb, vs == 1 ? nullptr : grad[mb].data(), vs == 0 ? nullptr : grad[mb].data());
      const int k = groups_of(vs, mb);
      if (k == 0) {
        give.backward_weight(vs, mb);
        continue;
      }
      const std::vector<float> in = give.weight_inputs(vs, mb, k);
      std::vector<float> answer = helper.weight_grads(k, in);
      EXPECT_EQ(answer.size(), give.weight_grads_floats(vs, k)) << what;
      give.backward_weight(vs, mb);
      answers.emplace_back(vs, mb, std::move(answer));
    }
  }
  for (auto it = answers.rbegin(); it != answers.rend(); ++it) {
    give.land_weight_grads(std::get<0>(*it), std::get<1>(*it), std::get<2>(*it));
  }
  expect_step_matches(give, keep, step, what);
}

}  // namespace model_test
