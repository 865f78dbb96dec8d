// StageModel's LM head and loss in vocabulary groups (unit vocab of computation migration; stage.hpp, "LM-head
// vocabulary groups"): the vocabulary-parallel loss is the loss (close to the ungrouped model's), and an owner that
// gives its last k vocabulary groups of F and B to a helper model computes the same bits as one that keeps them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "conductor/config/resolve.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "model_test_util.hpp"
#include "staging_backend.hpp"

using namespace conductor;
using namespace conductor::model;
using namespace model_test;

namespace {

// vocab 13 (tiny_deck): G = 4 gives groups of 3, 3, 3 and 4 columns.
plan::Plan vocab_plan(const std::vector<std::string>& units, int groups) { return grouped_plan(units, groups, 4); }

}  // namespace

// The vocabulary-parallel loss (per group max, sum of exponentials and target logit, combined over the groups) is
// the softmax cross-entropy: losses and gradients of a step agree with the ungrouped model's to rounding.
TEST(StageVocab, GroupedLossIsTheLoss) {
  const plan::Plan off = [] {
    auto deck = tiny_deck();
    deck.model.n_heads = 4;  // as vocab_plan's
    deck.parallel.pipeline = 2;
    return config::resolve(deck);
  }();
  for (const int groups : {4, 13}) {
    const plan::Plan on = vocab_plan({"vocab"}, groups);
    StageModel plain(off, {0, 1}, 2), grouped(on, {0, 1}, 2);
    ASSERT_EQ(grouped.vocab_groups(), groups);
    ASSERT_EQ(plain.vocab_groups(), 1);
    const double a = run_step(plain, 0), b = run_step(grouped, 0);
    EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << groups;
    for (int vs : {0, 1}) {
      EXPECT_LT(rel_err(grouped.read(vs, Buffer::Grads), plain.read(vs, Buffer::Grads)), 1e-5) << groups << " " << vs;
    }
  }
}

// An owner giving its last k = 1 .. G vocabulary groups of each F and B (F and B of one microbatch given different
// k, so B recomputes logits F gave away, and W the logit gradients B gave away) to a helper that holds only the first
// stage gives the bits of one keeping every group: losses and gradients, two steps, the units alone and with the
// MLP's and the heads'. One LM-head request per F and B of the last stage.
TEST(StageVocab, VocabGroupsGivenToAHelperGiveTheSameBits) {
  for (const std::vector<std::string>& units :
       {std::vector<std::string>{"vocab"}, {"mlp", "vocab"}, {"heads", "mlp", "vocab"}}) {
    for (const int groups : {4, 2}) {
      const plan::Plan plan = vocab_plan(units, groups);
      StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2), helper(plan, {0}, 2);
      const std::string what = std::to_string(units.size()) + " units, " + std::to_string(groups) + " groups";
      int vocab_requests = 0;
      const auto exchange = [&](bool forward, int k) {
        return helper_exchange(
            helper, forward, k, [&](const std::vector<float>& in) { vocab_requests += in.back() == 2.0f; }, what);
      };
      for (int step = 0; step < 2; ++step) {
        const std::size_t n = keep.activation_elements();
        std::vector<float> act(n), grad(n);
        give.begin_step(step);
        for (int mb = 0; mb < give.num_microbatches(); ++mb) {
          const int kf = 1 + (mb + step) % groups, kb = 1 + (mb + step + 1) % groups;
          give.forward(0, mb, nullptr, act.data());
          give.give_groups(kf, exchange(true, kf));
          give.forward(1, mb, act.data(), nullptr);
          give.give_groups(kb, exchange(false, kb));
          give.backward_input(1, mb, nullptr, grad.data());
          give.backward_weight(1, mb);
          give.backward_full(0, mb, grad.data(), nullptr);
        }
        expect_step_matches(give, keep, step, what);
      }
      EXPECT_EQ(vocab_requests, 2 * 2 * give.num_microbatches()) << what;
    }
  }
}

// W: the last k vocabulary groups' LM-head weight gradients computed by a helper that holds only the first stage,
// from weight_inputs (with the MLP's groups in the same request, and alone), landing after every W of the step has
// run (so held back out of order), give the bits of one model computing every group itself.
TEST(StageVocab, VocabWeightGradsGivenToAHelperGiveTheSameBits) {
  for (const std::vector<std::string>& units : {std::vector<std::string>{"vocab"}, {"mlp", "vocab"}}) {
    for (const int groups : {4, 2}) {
      const plan::Plan plan = vocab_plan(units, groups);
      StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2), helper(plan, {0}, 2);
      const std::string what = std::to_string(units.size()) + " units, " + std::to_string(groups) + " groups";
      for (int step = 0; step < 2; ++step) {
        // vocab alone: the first stage has nothing to give
        const auto groups_of = [&](int vs, int mb) {
          return vs == 0 && units.size() == 1 ? 0 : 1 + (mb + step) % groups;
        };
        expect_weight_help_matches(give, keep, helper, step, groups_of, what);
      }
    }
  }
}

// On a backend whose memory is not the host's (a GPU's; here StagingBackend: host memory that says it is not, and
// checks every transfer's direction), the owner builds its LM-head requests with downloads and lands the answers
// with uploads, and the helper stages each request into its memory and its answer out: F, B and W (with the layers'
// head and MLP groups in the same ops, given by a staged owner too) give the cpu model's bits. The path the cuda
// backend takes, run where no GPU is.
TEST(StageVocab, OnADeviceBackendTheGroupsStageTheirTransfers) {
  StagingBackend staging;
  const plan::Plan plan = vocab_plan({"heads", "mlp", "vocab"}, 4);
  StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2, &staging), helper(plan, {0}, 2, &staging);
  const std::size_t n = keep.activation_elements(), built = staging.uploaded();
  const DeviceBuffer act(staging, n * sizeof(float)), grad(staging, n * sizeof(float));
  int vocab_requests = 0;
  const auto exchange = [&](bool forward, int k) {
    return helper_exchange(
        helper, forward, k, [&](const std::vector<float>& in) { vocab_requests += in.back() == 2.0f; }, "staged");
  };
  for (int step = 0; step < 2; ++step) {
    give.begin_step(step);
    std::vector<std::pair<int, std::vector<float>>> answers;  // (mb, W's answer), landed last first
    for (int mb = 0; mb < give.num_microbatches(); ++mb) {
      const int kf = 1 + (mb + step) % 4, kb = 1 + (mb + step + 1) % 4, kw = 1 + (mb + step + 2) % 4;
      give.forward(0, mb, nullptr, act.f());
      give.give_groups(kf, exchange(true, kf));
      give.forward(1, mb, act.f(), nullptr);
      give.give_groups(kb, exchange(false, kb));
      give.backward_input(1, mb, nullptr, grad.f());
      const std::vector<float> in = give.weight_inputs(1, mb, kw);
      EXPECT_EQ(in.back(), 2.0f);  // the LM head's part is in W's request
      answers.emplace_back(mb, helper.weight_grads(kw, in));
      EXPECT_EQ(answers.back().second.size(), give.weight_grads_floats(1, kw));
      give.backward_weight(1, mb);
      give.backward_full(0, mb, grad.f(), nullptr);
    }
    for (auto it = answers.rbegin(); it != answers.rend(); ++it) give.land_weight_grads(1, it->first, it->second);
    expect_step_matches(give, keep, step, "staged, step " + std::to_string(step));
  }
  EXPECT_EQ(vocab_requests, 2 * 2 * give.num_microbatches());
  EXPECT_GT(staging.uploaded(), built);
}

// A helper checks what it gets: a request of the wrong size, or for more groups than there are.
TEST(StageVocab, HelperRefusesAMalformedRequest) {
  const plan::Plan plan = vocab_plan({"vocab"}, 4);
  StageModel helper(plan, {0}, 2);
  std::vector<float> request(10, 0.0f);
  request.push_back(2.0f);  // names the vocabulary unit
  EXPECT_THROW(helper.forward_help(1, request), Error);
  EXPECT_THROW(helper.backward_input_help(1, request), Error);
  EXPECT_THROW(helper.forward_help(5, request), Error);
  EXPECT_THROW(helper.weight_grads(1, request), Error);  // the LM head's part is short
  request.back() = 7.0f;
  EXPECT_THROW(helper.weight_grads(1, request), Error);  // names no LM-head part
}
