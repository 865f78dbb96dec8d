// StageModel: split backward, microbatch order, stage splits, finite differences, data, schedule, learning.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <tuple>

#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layer_split.hpp"
#include "conductor/model/optimizer.hpp"
#include "conductor/model/reference.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "model_test_util.hpp"
#include "scratch_dir.hpp"
#include "staging_backend.hpp"

using namespace conductor;
using namespace conductor::model;
using namespace model_test;

TEST(Data, MicrobatchIsPureFunctionOfSeedStepAndIndex) {
  auto deck = tiny_deck();
  DataSource a(config::resolve(deck)), b(config::resolve(deck));
  std::vector<int> i1, t1, i2, t2;
  a.microbatch(7, 2, i1, t1);
  b.microbatch(7, 2, i2, t2);
  EXPECT_EQ(i1, i2);
  EXPECT_EQ(t1, t2);
  for (std::size_t i = 0; i + 1 < i1.size(); i++) {
    if ((i + 1) % deck.model.seq_len != 0) {
      EXPECT_EQ(t1[i], i1[i + 1]);  // targets are inputs shifted by one
    }
  }
  a.microbatch(8, 2, i2, t2);
  EXPECT_NE(i1, i2);
  a.microbatch(7, 1, i2, t2);
  EXPECT_NE(i1, i2);
  deck.run.seed += 1;
  DataSource c(config::resolve(deck));
  c.microbatch(7, 2, i2, t2);
  EXPECT_NE(i1, i2);
}

TEST(Data, SyntheticSourceHasStructureBelowUnigramEntropy) {
  config::Deck deck;  // quickstart-sized defaults
  DataSource src(config::resolve(deck));
  const double h1 = src.empirical_unigram_entropy(20, 8), hc = src.empirical_conditional_entropy(20, 8);
  EXPECT_GT(h1, 4.0);  // close to log(256) = 5.55
  EXPECT_LT(hc, 1.5);  // four successors with probabilities .55 .25 .12 .08: 1.13 nats
}

TEST(Data, FileSourceReadsBytesAndRejectsShortFiles) {
  const test_support::ScratchDir scratch("conductor-model-data");
  const std::string path = (scratch / "model_data.txt").string();
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("hello conductor, this is a small byte-level corpus.", f);
  std::fclose(f);
  config::Deck deck;
  deck.data.source = "file";
  deck.data.path = path;
  deck.model.seq_len = 8;
  DataSource src(config::resolve(deck));
  std::vector<int> in, tg;
  src.microbatch(0, 0, in, tg);
  for (int v : in) EXPECT_TRUE(v >= ' ' && v <= 'z');
  deck.model.seq_len = 100;
  try {
    DataSource bad(config::resolve(deck));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Split, EvenExplicitAndErrors) {
  auto deck = tiny_deck();
  deck.model.n_layers = 7;
  EXPECT_EQ(split_layers(config::resolve(deck).model, 3), (std::vector<int>{3, 2, 2}));
  deck.model.layers_per_stage = {0, 5, 2};
  EXPECT_EQ(split_layers(config::resolve(deck).model, 3), (std::vector<int>{0, 5, 2}));
  EXPECT_THROW(split_layers(config::resolve(deck).model, 2), InputError);
  deck.model.layers_per_stage = {1, 5, 2};
  EXPECT_THROW(split_layers(config::resolve(deck).model, 3), InputError);
  deck.model.layers_per_stage.clear();
  EXPECT_THROW(split_layers(config::resolve(deck).model, 8), InputError);
}

TEST(Split, DeckKeysAreChecked) {
  config::LoadOptions opt;
  opt.source_name = "t.yaml";
  opt.overrides = {"parallel.pipeline=2", "model.layers_per_stage=[1,2]"};
  try {
    config::parse_deck("", opt);
    FAIL() << "expected DeckError";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("layers_per_stage sums to 3"), std::string::npos) << e.what();
  }
  opt.overrides = {"parallel.pipeline=2", "model.layers_per_stage=[1,3]", "optim.warmup_steps=3", "checkpoint.every=2",
                   "data.source=synthetic"};
  const config::Deck listed = config::parse_deck("", opt);
  EXPECT_EQ(listed.model.layers_per_stage, (std::vector<int>{1, 3}));
  EXPECT_EQ(config::parse_deck(config::to_yaml(listed), {}).model.layers_per_stage, (std::vector<int>{1, 3}));
  opt.overrides = {"model.layers_per_stage=even"};
  const config::Deck even = config::parse_deck("", opt);
  EXPECT_TRUE(even.model.layers_per_stage.empty());
  EXPECT_NE(config::to_yaml(even).find("layers_per_stage: even"), std::string::npos);
  opt.overrides = {"model.layers_per_stage=uneven"};
  EXPECT_THROW(config::parse_deck("", opt), DeckError);
}

TEST(Optim, WarmupThenCosineToFloor) {
  config::Deck deck;
  deck.optim.lr = 1.0;
  deck.optim.lr_min_ratio = 0.1;
  deck.optim.warmup_steps = 4;
  deck.run.steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(config::resolve(deck).optim, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(config::resolve(deck).optim, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(config::resolve(deck).optim, 4), 1.0);
  EXPECT_NEAR(learning_rate(config::resolve(deck).optim, 9), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(learning_rate(config::resolve(deck).optim, 14), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(config::resolve(deck).optim, 100), 0.1, 1e-12);
  deck.optim.decay_steps = 24;
  EXPECT_NEAR(learning_rate(config::resolve(deck).optim, 14), 0.55, 1e-12);
}

// B then W for every microbatch equals the full backward, bit for bit when W runs in the same order.
TEST(Stage, BackwardInputThenWeightEqualsFullBackward) {
  auto deck = tiny_deck();
  deck.parallel.pipeline = 2;
  StageModel full(config::resolve(deck), {0, 1}, 2), split(config::resolve(deck), {0, 1}, 2);
  const std::size_t n = full.activation_elements();
  std::vector<float> a(n), g_full(n), g_split(n), g0(n);
  full.begin_step(0);
  split.begin_step(0);
  std::vector<std::vector<float>> gin_full, gin_split;
  for (int mb = 0; mb < 3; mb++) {
    full.forward(0, mb, nullptr, a.data());
    full.forward(1, mb, a.data(), nullptr);
    full.backward_full(1, mb, nullptr, g_full.data());
    full.backward_full(0, mb, g_full.data(), nullptr);
    gin_full.push_back(g_full);
  }
  for (int mb = 0; mb < 3; mb++) {
    split.forward(0, mb, nullptr, a.data());
    split.forward(1, mb, a.data(), nullptr);
  }
  for (int mb = 0; mb < 3; mb++) {
    split.backward_input(1, mb, nullptr, g_split.data());
    gin_split.push_back(g_split);
    split.backward_input(0, mb, g_split.data(), nullptr);
  }
  EXPECT_EQ(split.in_flight(0), 3);
  for (int mb = 0; mb < 3; mb++) {
    split.backward_weight(1, mb);
    split.backward_weight(0, mb);
  }
  EXPECT_EQ(split.in_flight(0), 0);
  EXPECT_EQ(gin_full, gin_split);
  for (int vs : {0, 1}) EXPECT_EQ(full.read(vs, Buffer::Grads), split.read(vs, Buffer::Grads)) << vs;
  double norm = full.local_grad_sq_norm();
  EXPECT_GT(norm, 0.0);
  EXPECT_EQ(norm, split.local_grad_sq_norm());
}

// Microbatches in any order (F of 2 before F of 0, W long after B) give the same losses and gradients, bit for bit.
TEST(Stage, MicrobatchOrderDoesNotMatter) {
  auto deck = tiny_deck();
  deck.parallel.microbatches = 4;
  deck.parallel.pipeline = 2;
  StageModel ref(config::resolve(deck), {0, 1}, 2), odd(config::resolve(deck), {0, 1}, 2);
  run_step(ref, 3);
  const std::size_t n = ref.activation_elements();
  std::map<int, std::vector<float>> act, grad;
  odd.begin_step(3);
  for (int mb : {2, 0, 3}) {
    act[mb].resize(n);
    odd.forward(0, mb, nullptr, act[mb].data());
  }
  odd.forward(1, 3, act[3].data(), nullptr);
  grad[3].resize(n);
  odd.backward_input(1, 3, nullptr, grad[3].data());
  odd.forward(1, 0, act[0].data(), nullptr);
  act[1].resize(n);
  odd.forward(0, 1, nullptr, act[1].data());
  odd.backward_input(0, 3, grad[3].data(), nullptr);
  odd.forward(1, 2, act[2].data(), nullptr);
  odd.forward(1, 1, act[1].data(), nullptr);
  for (int mb : {1, 0, 2}) {
    grad[mb].resize(n);
    odd.backward_full(1, mb, nullptr, grad[mb].data());
  }
  odd.backward_weight(1, 3);
  for (int mb : {2, 1, 0}) odd.backward_full(0, mb, grad[mb].data(), nullptr);
  odd.backward_weight(0, 3);
  for (int mb = 0; mb < 4; mb++) EXPECT_EQ(ref.loss(mb), odd.loss(mb)) << mb;
  // Bit for bit: W's shares are added in microbatch order whatever order W ran in.
  for (int vs : {0, 1}) EXPECT_EQ(odd.read(vs, Buffer::Grads), ref.read(vs, Buffer::Grads));
}

// Computation migration's F and B (stage.hpp, "F and B in groups"): an owner that gives its last k groups of every
// F and B to a helper model (here in the same process; the runtime sends the same vectors over MPI) computes the
// same bits as one that keeps them, for every k, with even and uneven (MLP, G = 3: 5, 5, 6 columns) groups; the
// helper's groups reach W (gradients equal), and a helper holding another stage serves as well as any.
namespace {

// helper_backend: the helper model's backend (null: the cpu backend).
void expect_groups_given_give_the_same_bits(const std::vector<std::string>& units, int groups, int n_heads,
                                            const config::Deck& base = tiny_deck(), Backend* helper_backend = nullptr) {
  const plan::Plan plan = grouped_plan(units, groups, n_heads, base);
  StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2), helper(plan, {1}, 2, helper_backend);
  const bool mlp = std::find(units.begin(), units.end(), "mlp") != units.end();
  const bool heads = std::find(units.begin(), units.end(), "heads") != units.end();
  ASSERT_EQ(give.mlp_groups(), mlp ? groups : 1);
  ASSERT_EQ(give.head_groups(), heads ? groups : 1);
  const std::string what = std::to_string(units.size()) + " units, " + std::to_string(groups) + " groups";
  int requests = 0;
  const auto exchange = [&](bool forward, int k) {
    return helper_exchange(
        helper, forward, k, [&](const std::vector<float>&) { ++requests; }, what);
  };
  for (int step = 0; step < 2; ++step) {
    const std::size_t n = keep.activation_elements();
    std::vector<float> act(n), grad(n);
    give.begin_step(step);
    int op = 0;
    for (int mb = 0; mb < give.num_microbatches(); ++mb) {
      for (int vs : {0, 1}) {
        const int k = 1 + op++ % groups;
        give.give_groups(k, exchange(true, k));
        give.forward(vs, mb, vs == 0 ? nullptr : act.data(), vs == 1 ? nullptr : act.data());
      }
      for (int vs : {1, 0}) {
        const int k = 1 + op++ % groups;
        give.give_groups(k, exchange(false, k));
        give.backward_full(vs, mb, vs == 1 ? nullptr : grad.data(), vs == 0 ? nullptr : grad.data());
      }
    }
    expect_step_matches(give, keep, step, what);
  }
  // One request per layer and grouped unit of every F and B.
  EXPECT_EQ(requests, 2 * give.num_microbatches() * 2 * plan.model.n_layers * (mlp + heads)) << what;
  EXPECT_THROW(give.give_groups(groups + 1, {}), Error);
}

}  // namespace

TEST(Stage, MlpGroupsGivenToAHelperGiveTheSameBits) {
  for (const int groups : {4, 3}) expect_groups_given_give_the_same_bits({"mlp"}, groups, 2);
}

// The attention head groups (their QKV columns, attention core and output-projection rows), alone and with the
// MLP's: G = 4 (one head each) and 2.
TEST(Stage, HeadGroupsGivenToAHelperGiveTheSameBits) {
  for (const int groups : {4, 2}) {
    expect_groups_given_give_the_same_bits({"heads"}, groups, 4);
    expect_groups_given_give_the_same_bits({"mlp", "heads"}, groups, 4);
  }
}

// A helper's MLP F answer carries each group's pre-activation, and the owner recomputes the GELU output from it
// (stage_migration.cpp, mlp_pass). That is the helper's bits because the elementwise GELU gives the same bits
// whatever the buffer's length and alignment: checked here on odd lengths at every offset of a vector, and end to
// end on groups of odd size (B T = 5, G = 3: 25, 25 and 30 floats), where W's fcproj_w gradient (from the owner's
// GELU output) must equal the reference's bit for bit.
TEST(Stage, RecomputedGeluIsTheHelpersBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const std::size_t n : {1, 25, 31, 257}) {
    std::vector<float> x(n + 16), at(n + 16);
    for (float& v : x) v = normal(rng);
    const DeviceBuffer in(cpu_backend(), n * sizeof(float)), out(cpu_backend(), n * sizeof(float));
    for (std::size_t offset = 0; offset < 16; ++offset) {
      std::copy(x.begin() + offset, x.begin() + offset + n, in.f());  // a fresh compact buffer, as the model's
      gelu_forward(out.f(), in.f(), n, cpu_backend());
      gelu_forward(at.data() + offset, x.data() + offset, n, cpu_backend());  // at any offset in a larger one
      ASSERT_EQ(std::memcmp(out.f(), at.data() + offset, n * sizeof(float)), 0) << n << " at " << offset;  // bits
    }
  }
  config::Deck odd = tiny_deck();
  odd.model.seq_len = 5;
  odd.parallel.microbatch_size = 1;
  expect_groups_given_give_the_same_bits({"mlp"}, 3, 2, odd);
}

// The attention head groups' weight gradients (alone, and with the MLP groups in the same request) computed by a
// helper model from weight_inputs, landing after every W of the step has run (so held back out of order), give the
// bits of the same model computing every group itself; k = 1 .. G groups per op, G = 4 (one head each) and 2.
TEST(Stage, HeadGroupWeightGradsGivenToAHelperGiveTheSameBits) {
  for (const std::vector<std::string>& units : {std::vector<std::string>{"heads"}, {"mlp", "heads"}}) {
    for (const int groups : {4, 2}) {
      const plan::Plan plan = grouped_plan(units, groups, 4);
      StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2), helper(plan, {1}, 2);
      ASSERT_EQ(give.head_groups(), groups);
      ASSERT_EQ(give.mlp_groups(), units.size() == 2 ? groups : 1);
      const std::string what = std::to_string(units.size()) + " units, " + std::to_string(groups) + " groups";
      for (int step = 0; step < 2; ++step) {
        int op = 0;  // k = 1 .. G groups in turn
        expect_weight_help_matches(
            give, keep, helper, step, [&](int, int) { return 1 + op++ % groups; }, what);
      }
      EXPECT_THROW(helper.weight_grads(groups + 1, {}), Error);
    }
  }
}

// A helper whose backend's memory is not the host's (a GPU's; here StagingBackend: host memory that says it is
// not, and checks every transfer's direction) stages each request into its memory and the answer out of it
// (stage_migration.cpp: StagedRequest, StagedAnswer): the same bits as a cpu helper's, for F, B and W of both
// units. The path the cuda backend's helper takes, run where no GPU is.
TEST(Stage, HelperOnADeviceBackendStagesItsRequests) {
  StagingBackend staging;
  std::size_t built = 0;  // what building the helper model uploads (its weights)
  {
    const StageModel helper(grouped_plan({"mlp", "heads"}, 4, 4), {1}, 2, &staging);
    built = staging.uploaded();
  }
  expect_groups_given_give_the_same_bits({"mlp", "heads"}, 4, 4, tiny_deck(), &staging);
  EXPECT_GT(staging.uploaded(), 2 * built);  // the F and B requests were uploaded
  for (const std::vector<std::string>& units : {std::vector<std::string>{"mlp"}, {"mlp", "heads"}}) {
    const plan::Plan plan = grouped_plan(units, 2, 4);
    StageModel keep(plan, {0, 1}, 2), give(plan, {0, 1}, 2), helper(plan, {1}, 2, &staging);
    const std::size_t before = staging.uploaded();
    for (int step = 0; step < 2; ++step) {
      int op = 0;
      expect_weight_help_matches(
          give, keep, helper, step, [&](int, int) { return 1 + op++ % 2; }, "staged W");
    }
    EXPECT_GT(staging.uploaded(), before);  // W's requests were uploaded
  }
}

TEST(Stage, OutOfOrderCallsAreRefused) {
  auto deck = tiny_deck();
  StageModel m(config::resolve(deck), {0}, 1);
  m.begin_step(0);
  EXPECT_THROW(m.backward_input(0, 0, nullptr, nullptr), Error);
  m.forward(0, 0, nullptr, nullptr);
  EXPECT_THROW(m.forward(0, 0, nullptr, nullptr), Error);
  EXPECT_THROW(m.backward_weight(0, 0), Error);
  EXPECT_THROW(m.begin_step(1), Error);                    // microbatch 0 still in flight
  EXPECT_THROW(m.forward(1, 1, nullptr, nullptr), Error);  // stage not held
  EXPECT_THROW(m.forward(0, 3, nullptr, nullptr), Error);  // microbatch out of range
  m.backward_full(0, 0, nullptr, nullptr);
  m.begin_step(1);
}

// Any split over virtual stages computes the same model: same initial weights, losses and gradients.
TEST(Stage, SplitOverVirtualStagesComputesTheSameModel) {
  auto deck = tiny_deck();
  deck.model.n_layers = 4;
  StageModel one(config::resolve(deck), {0}, 1);
  deck.parallel.pipeline = 3;
  deck.model.layers_per_stage = {1, 0, 3};
  StageModel three(config::resolve(deck), {0, 1, 2}, 3);
  EXPECT_EQ(one.parameter_count(0), three.parameter_count(0) + three.parameter_count(1) + three.parameter_count(2));
  for (int step = 0; step < 2; step++) {
    EXPECT_EQ(run_step(one, step), run_step(three, step));
    for (int vs = 0; vs < 3; vs++) {
      for (const auto& t : three.tensors(vs)) {
        EXPECT_EQ(one.read_tensor(0, Buffer::Grads, t.name), three.read_tensor(vs, Buffer::Grads, t.name)) << t.name;
      }
    }
    one.optimizer_step(std::sqrt(one.local_grad_sq_norm()), step);
    three.optimizer_step(std::sqrt(three.local_grad_sq_norm()), step);
  }
}

// Central finite differences of the fp32 loss against the analytic gradient, on every tensor.
TEST(Stage, GradientsMatchFiniteDifferences) {
  auto deck = tiny_deck();
  deck.model.n_layers = 2;
  deck.parallel.microbatches = 2;
  StageModel m(config::resolve(deck), {0}, 1);
  // Larger weights than the GPT-2 init so every gradient is well above fp32 noise.
  std::vector<float> p = m.read(0, Buffer::Params);
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 0.4f);
  for (const auto& t : m.tensors(0)) {
    for (std::size_t i = 0; i < t.numel; i++) p[t.offset + i] += nd(gen);
  }
  m.write(0, Buffer::Params, p);
  run_step(m, 0);
  const std::vector<float> grad = m.read(0, Buffer::Grads);
  const float eps = 1e-2f;
  for (const auto& t : m.tensors(0)) {
    double num = 0, den = 0;
    for (int k = 0; k < 6; k++) {
      const std::size_t i = t.offset + (k * 7919u) % t.numel;
      std::vector<float> q = p;
      q[i] = p[i] + eps;
      m.write(0, Buffer::Params, q);
      const double up = run_step(m, 0);
      q[i] = p[i] - eps;
      m.write(0, Buffer::Params, q);
      const double down = run_step(m, 0);
      const double fd = (up - down) / (2 * eps);
      num += (fd - grad[i]) * (fd - grad[i]);
      den += static_cast<double>(grad[i]) * grad[i];
    }
    EXPECT_LT(std::sqrt(num), 2e-2 * std::sqrt(den) + 1e-4) << t.name << " |g| " << std::sqrt(den);
  }
}

TEST(Stage, ActivationBytesCountLayersAndHead) {
  auto deck = tiny_deck();
  deck.model.n_layers = 4;
  deck.parallel.pipeline = 2;
  deck.model.layers_per_stage = {3, 1};
  StageModel m(config::resolve(deck), {0, 1}, 2);
  EXPECT_EQ(m.activation_elements(), 2u * 6 * 8);
  EXPECT_GT(m.activation_bytes_per_microbatch(0), m.activation_bytes_per_microbatch(1) / 2);
  // One layer of this shape keeps at least x, ln1, x2, ln2, y, qkv (3x), dqkv (3x), h, gelu, dh and 4 grads.
  const std::size_t btc = 2 * 6 * 8;
  EXPECT_GE(m.activation_bytes_per_microbatch(0), 3 * (19 * btc) * sizeof(float));
  EXPECT_EQ(m.activation_bytes_per_microbatch(),
            std::max(m.activation_bytes_per_microbatch(0), m.activation_bytes_per_microbatch(1)));
}

// The quickstart deck (inputs/quickstart.yaml: vocab 256, seq 64, d 64, 4 heads, 4 layers, 8 microbatches of 4,
// 20 steps, default optimizer) learns the synthetic source well below its unigram entropy.
TEST(Training, QuickstartLearnsBelowUnigramEntropy) {
  const char* src = std::getenv("CONDUCTOR_SOURCE_DIR");
  if (!src) src = CONDUCTOR_SOURCE_DIR_DEFAULT;
  const std::string path = std::string(src) + "/inputs/quickstart.yaml";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  config::LoadOptions opt;
  opt.source_name = path;
  const config::Deck deck = config::parse_deck(text.str(), opt);
  ASSERT_EQ(deck.model.vocab, 256);
  const double unigram =
      DataSource(config::resolve(deck)).empirical_unigram_entropy(deck.run.steps, deck.parallel.microbatches);
  const double conditional =
      DataSource(config::resolve(deck)).empirical_conditional_entropy(deck.run.steps, deck.parallel.microbatches);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<double> losses = train_reference(config::resolve(deck));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "quickstart: %zu steps, loss %.4f -> %.4f, unigram entropy %.4f, conditional entropy %.4f nats; "
      "%.1f ms/step (%d microbatches of %dx%d tokens, 1 thread)\n",
      losses.size(), losses.front(), losses.back(), unigram, conditional, 1e3 * secs / losses.size(),
      deck.parallel.microbatches, deck.parallel.microbatch_size, deck.model.seq_len);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);  // starts at chance
  EXPECT_LT(losses.back(), unigram - 1.0);            // and ends far below any context-free model
}
