// Policy layer: the environment reproduces the engine, PPO learns where the heuristic is wrong, policy files
// round-trip, training is deterministic per seed, bad files are clear errors, the shipped policy loads and
// carries over from p=4 to p=8, and the ppo planner replans from measured times.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <omp.h>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/policy/compare.hpp"
#include "conductor/policy/env.hpp"
#include "conductor/policy/policy.hpp"
#include "conductor/policy/ppo.hpp"
#include "conductor/policy/ppo_planner.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/sim/control_loop.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "scratch_dir.hpp"

using namespace conductor;
namespace fs = std::filesystem;

namespace {

// LibTorch picks its CPU kernels by the host's vector width (AVX2, AVX-512), and their float results differ in
// the last bits, so a PPO run of a fixed seed takes different paths on different CPUs (the toy below learns on
// one and not on another). The scalar kernels give every machine the same numbers; set before any tensor op.
const bool kPortableKernels = [] { return setenv("ATEN_CPU_CAPABILITY", "default", 1) == 0; }();

// In a folder of this process, removed at exit.
std::string temp_path(const std::string& name) {
  static const test_support::ScratchDir scratch("conductor_policy_test");
  return (scratch / name).string();
}

// Writes a policy file's `bytes`, damaged, to temp_path(name) and expects load_policy to refuse it with an
// InputError saying "'PATH' is corrupt: " and then `what`.
void expect_corrupt(const std::string& name, const std::string& bytes, const std::string& what) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    policy::load_policy(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "' is corrupt: " + what), std::string::npos) << e.what();
  }
}

// A list that runs each microbatch's F, B, W back to back: read as a readiness hint ("schedule" ranking) it
// makes a rank run a heavy W before the F the next stage is waiting for. B first, then F, W filling idle time
// (bfw) is the known better order here.
sched::Schedule eager_w_list(int p, int m) {
  sched::Schedule s;
  s.p = p;
  s.m = m;
  s.v = 1;
  s.name = "eager-w";
  s.ranks.assign(p, {});
  for (int r = 0; r < p; ++r) {
    for (int b = 0; b < m; ++b) {
      s.ranks[r].push_back({sched::OpKind::F, b, 0});
      s.ranks[r].push_back({sched::OpKind::B, b, 0});
      s.ranks[r].push_back({sched::OpKind::W, b, 0});
    }
  }
  return s;
}

policy::TrainSetup toy_setup(unsigned long long seed, int iterations) {
  policy::TrainSetup su;
  su.base = eager_w_list(3, 6);
  su.cost = sched::uniform_cost(1.0, 1.0, 2.0, 0.0, 0.5);
  su.env.heuristic = sched::Hint::Schedule;
  su.env.memory_limit = 3;
  su.env.memory_after_b = 0.5;
  su.ppo.iterations = iterations;
  su.ppo.episodes = 8;
  su.ppo.noise_levels = {0.0, 0.05};
  su.ppo.cost_spread = 0.0;
  su.ppo.learning_rate = 1e-2;
  su.ppo.entropy_coef = 0.01;
  su.ppo.minibatch = 64;
  su.ppo.hidden = 16;
  su.ppo.seed = seed;
  return su;
}

double noise_free(const policy::Policy& pol, const policy::TrainSetup& su, sched::Schedule* order = nullptr) {
  auto compute = [&](int r, const sched::Action& a) { return su.cost.op_time(r, a.kind, su.base.v); };
  auto comm = [&](const sched::Transfer&) { return su.cost.comm_time(); };
  return policy::greedy_makespan(pol, su.base, su.env, su.cost, compute, comm, order);
}

double heuristic_makespan(const policy::TrainSetup& su, sched::Hint hint) {
  sched::ExecOptions eo;
  eo.execution = sched::Execution::Readiness;
  eo.hint = hint;
  eo.memory_limit = su.env.memory_limit;
  eo.memory_after_b = su.env.memory_after_b;
  return sched::execute(
             su.base, eo, [&](int r, const sched::Action& a) { return su.cost.op_time(r, a.kind, su.base.v); },
             [&](const sched::Transfer&) { return su.cost.comm_time(); })
      .makespan();
}

// One trained toy policy shared by the tests that need a non-trivial policy (training is the slow part).
const policy::TrainResult& toy_trained() {
  static const policy::TrainResult result = policy::train_ppo(toy_setup(11, 40));
  return result;
}

config::Deck deck_of(std::vector<std::string> overrides) {
  config::LoadOptions lo;
  lo.source_name = "test";
  lo.command = config::Command::Simulate;
  lo.overrides = std::move(overrides);
  return config::parse_deck("", lo);
}

// The deck simulated for `steps` steps with the PPO planner of `pol` and with the generator's order: both runs.
std::pair<sim::RunResult, sim::RunResult> ppo_against_generator(const config::Deck& deck, const policy::Policy& pol,
                                                                int steps) {
  const plan::Plan plan = config::resolve(deck);
  const sched::Schedule gen = sched::make_schedule(plan);
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, gen);
  const sim::SimOptions opt = sim::SimOptions::from_plan(plan, gen);
  auto ppo = policy::make_ppo_planner(plan, gen, pol);
  sched::StaticPlanner fixed_planner(gen);
  return {sim::simulate_with_planner(noise, opt, steps, *ppo).run,
          sim::simulate_with_planner(noise, opt, steps, fixed_planner).run};
}

}  // namespace

// With the heuristic's choice at every decision, the environment is readiness execution: same realized order
// and makespan as sched::execute for every hint, under noise, with and without transfer times.
TEST(PolicyEnv, HeuristicChoiceReproducesTheEngine) {
  for (const char* hint : {"schedule", "bf", "bfw"}) {
    for (int v : {1, 2}) {
      const sched::Schedule s = v == 1 ? sched::generate("zb-2p", 4, 10, 1, sched::uniform_cost(1, 1, 1, 0.1, 0.3))
                                       : sched::generate("zb-v", 4, 10, 2, sched::uniform_cost(1, 1, 1, 0.1, 0.3));
      const sched::CostModel cost = sched::uniform_cost(1.0, 1.1, 0.9, 0.1, 0.3);
      policy::EpisodeDraw draw;
      draw.seed = 99;
      draw.level = 0.2;
      draw.cost = cost;
      const auto compute = policy::draw_compute(draw, v);
      const auto comm = policy::draw_comm(draw);
      policy::EnvOptions env;
      env.heuristic = sched::parse_hint(hint);
      env.memory_limit = v == 1 ? 8 : 4;
      env.memory_after_b = 0.3;
      std::vector<policy::Decision> rec;
      const auto ro = policy::rollout(
          s, env, cost, compute, comm, [](const policy::Decision&) { return 0; }, &rec);
      sched::ExecOptions eo;
      eo.execution = sched::Execution::Readiness;
      eo.hint = env.heuristic;
      eo.memory_limit = env.memory_limit;
      eo.memory_after_b = env.memory_after_b;
      const auto ex = sched::execute(s, eo, compute, comm);
      EXPECT_EQ(ro.order, ex.order) << hint << " v=" << v;
      EXPECT_DOUBLE_EQ(ro.makespan(), ex.makespan()) << hint << " v=" << v;
      EXPECT_FALSE(rec.empty());
      for (const auto& d : rec) {
        ASSERT_GE(d.num_candidates, 2);
        ASSERT_LE(d.num_candidates, 3 * v);
        EXPECT_EQ(d.features[15], 0.0f);  // candidate 0 is the heuristic's choice
        EXPECT_EQ(d.features[16], 1.0f);
      }
    }
  }
}

// A window of steps (schedule.post_validation): with the heuristic's choice the rollout of 3 steps is the
// simulator's run of 3 steps under readiness execution, overlapping (sim::StepClock) or synchronous: same span
// and busy time, so the same run bubble; overlapping is shorter, and decisions' idle only grows over the window.
TEST(PolicyEnv, WindowOfStepsReproducesTheSimulatorsRun) {
  const sched::CostModel cost = sched::uniform_cost(1.0, 1.2, 0.7, 0.1, 0.5);
  const sched::Schedule s = sched::generate("zb-2p", 4, 8, 1, cost);
  policy::EpisodeDraw draw;
  draw.cost = cost;  // level 0: noise-free
  double span[2] = {0, 0};
  for (bool overlap : {false, true}) {
    policy::EnvOptions env;
    env.heuristic = sched::Hint::BFW;
    env.memory_limit = 8;
    env.memory_after_b = cost.memory_after_b;
    env.steps = 3;
    env.overlap_steps = overlap;
    std::vector<policy::Decision> rec;
    const auto ro = policy::rollout(
        s, env, cost, policy::draw_compute(draw, 1), policy::draw_comm(draw), [](const policy::Decision&) { return 0; },
        &rec);
    plan::Noise none;
    const sim::NoiseModel noise(s, cost, none);
    sim::SimOptions so;
    so.execution = sched::Execution::Readiness;
    so.hint = sched::Hint::BFW;
    so.memory_limit = 8;
    so.overlap_steps = overlap;
    const sim::RunResult run = sim::simulate_run(s, noise, so, 3);
    EXPECT_NEAR(ro.makespan(), run.span_ms, 1e-9) << "overlap " << overlap;
    EXPECT_NEAR(ro.idle() / (s.p * ro.makespan()), run.run_bubble_ratio, 1e-12) << "overlap " << overlap;
    ASSERT_FALSE(rec.empty());
    for (std::size_t t = 1; t < rec.size(); ++t) EXPECT_GE(rec[t].idle, rec[t - 1].idle - 1e-9);
    EXPECT_LE(rec.back().idle, ro.idle() + 1e-9);
    span[overlap] = ro.makespan();
  }
  EXPECT_LT(span[1], span[0] - 1e-6);
}

// An untrained policy is the heuristic (the skip term on the heuristic rank dominates).
TEST(PolicyEnv, UntrainedPolicyFollowsTheHeuristic) {
  const auto su = toy_setup(1, 0);
  const policy::Policy pol = policy::Policy::initial(16, sched::Hint::Schedule, 3);
  EXPECT_DOUBLE_EQ(noise_free(pol, su), heuristic_makespan(su, sched::Hint::Schedule));
}

// The toy where the heuristic is wrong: PPO must learn to beat it, and reach the known better order.
TEST(PolicyPPO, LearnsToBeatAWrongHeuristic) {
  const auto su = toy_setup(11, 40);
  const double wrong = heuristic_makespan(su, sched::Hint::Schedule);
  const double known = heuristic_makespan(su, sched::Hint::BFW);
  ASSERT_LT(known, wrong * 0.95) << "the toy must have a clearly better order";
  const auto& res = toy_trained();
  sched::Schedule order;
  const double learned = noise_free(res.policy, su, &order);
  EXPECT_LT(learned, wrong * 0.97) << "heuristic " << wrong << ", bfw " << known;
  EXPECT_LE(learned, known * 1.02) << "heuristic " << wrong << ", bfw " << known;
  EXPECT_EQ(sched::validate(order, su.env.memory_limit, su.env.memory_after_b).ok, true);
  // The training curve shows the improvement on the sampled episodes too.
  const auto& c = res.curve;
  EXPECT_LT(c.back().greedy_makespan, c.front().heuristic_makespan);
}

// The comparison table after training: with overlapping steps (post-validation) each method is ranked on the
// run's span, not on its steps' own makespans, which understate what such a run delivers; the method column is as
// wide as its longest name.
TEST(PolicyCompare, OverlappingStepsAreRankedOnTheRunsSpan) {
  const config::Deck deck = deck_of({"schedule.post_validation=true", "noise.kind=gaussian", "noise.level=0.1"});
  const plan::Plan plan = config::resolve(deck);
  const auto rows = policy::compare_methods(plan, toy_trained().policy, 4);
  ASSERT_FALSE(rows.empty());
  const sched::Schedule gen = sched::make_schedule(plan);
  plan::Plan strict = plan;
  strict.schedule.execution = "strict";
  strict.schedule.hint = "schedule";
  sched::StaticPlanner fixed(gen);
  const sim::RunResult run = sim::simulate_with_planner(sim::NoiseModel::from_plan(strict, gen),
                                                        sim::SimOptions::from_plan(strict, gen), 4, fixed)
                                 .run;
  EXPECT_DOUBLE_EQ(rows[0].throughput, run.run_throughput);
  EXPECT_DOUBLE_EQ(rows[0].bubble_ratio, run.run_bubble_ratio);
  EXPECT_DOUBLE_EQ(rows[0].makespan_ms, run.span_ms / 4);

  std::vector<policy::MethodResult> named(2);
  named[0].name = "1f1b-interleaved readiness bfw";
  named[1].name = "ppo strict";
  std::istringstream table(policy::format_table(named));
  std::string header, first, second;
  std::getline(table, header);
  std::getline(table, first);
  std::getline(table, second);
  EXPECT_EQ(header.find("completion_ms") + std::string("completion_ms").size(), first.find("0.0000") + 6) << first;
  EXPECT_EQ(first.find("0.0000"), second.find("0.0000")) << second;
}

TEST(PolicyPPO, DeterministicPerSeed) {
  const auto a = policy::train_ppo(toy_setup(5, 3));
  const auto b = policy::train_ppo(toy_setup(5, 3));
  const auto c = policy::train_ppo(toy_setup(6, 3));
  EXPECT_EQ(a.policy.w1, b.policy.w1);
  EXPECT_EQ(a.policy.skip, b.policy.skip);
  EXPECT_EQ(a.policy.c1, b.policy.c1);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (std::size_t i = 0; i < a.curve.size(); ++i) {
    EXPECT_EQ(a.curve[i].sampled_makespan, b.curve[i].sampled_makespan);
    EXPECT_EQ(a.curve[i].policy_loss, b.curve[i].policy_loss);
  }
  EXPECT_NE(a.policy.w1, c.policy.w1);
}

TEST(PolicyFile, RoundTripGivesIdenticalDecisions) {
  const auto& pol = toy_trained().policy;
  const std::string path = temp_path("roundtrip.pt");
  policy::save_policy(pol, path);
  const policy::Policy back = policy::load_policy(path);
  EXPECT_EQ(back.hidden, pol.hidden);
  EXPECT_EQ(back.heuristic, pol.heuristic);
  EXPECT_EQ(back.w1, pol.w1);
  EXPECT_EQ(back.w2, pol.w2);
  EXPECT_EQ(back.skip, pol.skip);
  // Same decisions on a noisy episode of another size.
  const sched::Schedule s = sched::generate("zb-2p", 4, 12, 1, sched::uniform_cost(1, 1, 1));
  policy::EpisodeDraw draw;
  draw.seed = 5;
  draw.level = 0.15;
  draw.cost = sched::uniform_cost(1, 1, 1, 0.05, 0.5);
  policy::EnvOptions env;
  env.heuristic = pol.heuristic;
  env.memory_limit = 8;
  env.memory_after_b = 0.5;
  std::vector<int> ca, cb;
  const auto ra = policy::rollout(s, env, draw.cost, policy::draw_compute(draw, 1), policy::draw_comm(draw),
                                  [&](const policy::Decision& d) {
                                    ca.push_back(pol.greedy(d));
                                    return ca.back();
                                  });
  const auto rb = policy::rollout(s, env, draw.cost, policy::draw_compute(draw, 1), policy::draw_comm(draw),
                                  [&](const policy::Decision& d) {
                                    cb.push_back(back.greedy(d));
                                    return cb.back();
                                  });
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(ra.order, rb.order);
}

TEST(PolicyFile, BadFilesAreClearInputErrors) {
  auto expect_error = [](const std::string& path, const std::string& what) {
    try {
      policy::load_policy(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_error(temp_path("does-not-exist.pt"), "no such file");

  const std::string text = temp_path("text.pt");
  std::ofstream(text) << "pipeline 4\nmicrobatches 8\n";
  expect_error(text, "not a conductor policy");
  // A folder or a device is named as such (a device was read until its first newline: /dev/zero never ends).
  const std::string folder = temp_path("policy-folder");
  std::filesystem::create_directories(folder);
  expect_error(folder, "is a folder");
  expect_error("/dev/zero", "is a device");

  // A valid file, then damaged: its archive truncated, or its header claiming another feature version.
  const std::string good = temp_path("good.pt");
  policy::save_policy(policy::Policy::initial(8, sched::Hint::BFW, 1), good);
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t eol = bytes.find('\n');
  const std::string truncated = temp_path("truncated.pt");
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, eol + 1 + (bytes.size() - eol) / 2);
  expect_error(truncated, "corrupt");
  const std::string garbage = temp_path("garbage.pt");
  std::ofstream(garbage, std::ios::binary) << bytes.substr(0, eol + 1) << "this is not a torch archive";
  expect_error(garbage, "corrupt");

  // One flipped byte inside the archive: refused by its CRC-32 before LibTorch reads it (a zip CRC alone
  // did not catch every such change). A header without the checksum is refused too.
  std::string flipped = bytes;
  flipped[eol + 1 + (bytes.size() - eol) / 2] ^= 0x20;
  const std::string flipped_path = temp_path("flipped.pt");
  std::ofstream(flipped_path, std::ios::binary) << flipped;
  expect_error(flipped_path, "CRC-32");
  std::string unstamped = bytes;
  unstamped.erase(unstamped.find(" body_bytes="), eol - unstamped.find(" body_bytes="));
  const std::string unstamped_path = temp_path("unstamped.pt");
  std::ofstream(unstamped_path, std::ios::binary) << unstamped;
  expect_error(unstamped_path, "written before policy checksums");
  // A checksum present but damaged (upper case, decimal) is no pre-checksum header: re-stamping it was the advice.
  const std::size_t crc_at = bytes.find("body_crc32=0x") + 13;
  for (const std::string& damaged : {std::string("ABCDEF12"), std::string("123")}) {
    std::string bad = bytes;
    bad.replace(crc_at, 8, damaged);
    const std::string bad_path = temp_path("bad-crc.pt");
    std::ofstream(bad_path, std::ios::binary | std::ios::trunc) << bad;
    expect_error(bad_path, "is corrupt: its header's body_crc32 = '0x" + damaged +
                               "' is not 0x and 8 lower-case hex digits; retrain it, or restore it from a copy");
  }

  std::string old = bytes;
  const std::string key = "feature_version=" + std::to_string(policy::kFeatureVersion);
  old.replace(old.find(key), key.size(), "feature_version=" + std::to_string(policy::kFeatureVersion + 41));
  const std::string other = temp_path("other-version.pt");
  std::ofstream(other, std::ios::binary) << old;
  expect_error(other, "feature version " + std::to_string(policy::kFeatureVersion + 41));

  // The planner factory reports the same error.
  config::Deck deck = deck_of({"scheduler.kind=ppo", "scheduler.policy=" + other});
  EXPECT_THROW(policy::make_ppo_planner(config::resolve(deck), sched::make_schedule(config::resolve(deck))),
               InputError);
}

// What a run records of the policy that drove it (summary.json `policy`): the planner built from a file names the
// file (absolute), its size and the CRC-32 of the very bytes read, and the training deck's CRC-32 from the header
// (train-policy writes it; null in the summary for a file without it). A damaged deck_crc32 is a corrupt header.
TEST(PolicyFile, PlannerNamesItsPolicyFile) {
  policy::Policy pol = policy::Policy::initial(8, sched::Hint::BFW, 1);
  pol.deck_crc32 = "0x0badf00d";
  const std::string path = temp_path("identity.pt");
  policy::save_policy(pol, path);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.substr(0, bytes.find('\n')).find(" deck_crc32=0x0badf00d "), std::string::npos);

  const config::Deck deck = deck_of({"scheduler.kind=ppo", "scheduler.policy=" + path});
  const plan::Plan plan = config::resolve(deck);
  const auto planner = policy::make_ppo_planner(plan, sched::make_schedule(plan));
  const sched::PolicySource* source = planner->policy_source();
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->path, fs::absolute(path).lexically_normal().string());
  EXPECT_EQ(source->bytes, bytes.size());
  EXPECT_EQ(source->crc32, util::crc32_hex(util::crc32(bytes.data(), bytes.size())));
  EXPECT_EQ(source->deck_crc32, "0x0badf00d");
  // A policy given in memory has no file to name; a file without deck_crc32 names none.
  EXPECT_EQ(policy::make_ppo_planner(plan, sched::make_schedule(plan), pol)->policy_source(), nullptr);
  const std::string plain = temp_path("identity-plain.pt");
  policy::save_policy(policy::Policy::initial(8, sched::Hint::BFW, 1), plain);
  sched::PolicySource plain_source;
  EXPECT_EQ(policy::load_policy(plain, &plain_source).deck_crc32, "");
  EXPECT_EQ(plain_source.deck_crc32, "");

  std::string damaged = bytes;
  damaged.replace(damaged.find("deck_crc32=0x0badf00d"), 21, "deck_crc32=0xnotahex");
  expect_corrupt("identity-bad.pt", damaged, "its header's deck_crc32 = '0xnotahex'");
}

// A header whose sizes disagree with its (checksummed) body: the error gives both shapes, the body's and the one
// the header's hidden width needs (it said only "has the wrong shape").
TEST(PolicyFile, WrongShapeNamesBothShapes) {
  const std::string good = temp_path("shape-good.pt");
  policy::save_policy(policy::Policy::initial(8, sched::Hint::BFW, 1), good);
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.replace(bytes.find(" hidden=8 "), 10, " hidden=16 ");  // the body (and its CRC-32) unchanged
  const std::string f = std::to_string(policy::kNumFeatures);
  expect_corrupt(
      "shape-wide.pt", bytes,
      "tensor 'actor.l1.weight' has shape [8, " + f + "], the header's sizes (hidden=16) need [16, " + f + "]");
}

// A damaged header field is named with its value and what is allowed ("header lacks a valid 'heuristic'" named
// neither).
TEST(PolicyFile, DamagedHeaderFieldsNameTheirValues) {
  const std::string good = temp_path("header-good.pt");
  policy::save_policy(policy::Policy::initial(8, sched::Hint::BFW, 1), good);
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    b.replace(b.find(from), from.size(), to);
    return b;
  };
  const std::string f = std::to_string(policy::kNumFeatures), g = std::to_string(policy::kNumGlobal);
  expect_corrupt("h-features.pt", edited(" features=" + f + " ", " features=99 "),
                 "its header's feature counts (features=99, global=" + g + ") are not feature version");
  expect_corrupt("h-heuristic.pt", edited(" heuristic=bfw", " heuristic=zzz"),
                 "its header's 'heuristic' is 'zzz' (allowed: schedule, bf, bfw or critical");
  expect_corrupt("h-hidden.pt", edited(" hidden=8 ", " hidden=abc "), "its header's 'hidden' is 'abc', not an integer");
  expect_corrupt("h-hidden2.pt", edited(" hidden=8 ", " hidden=8x "), "its header's 'hidden' is '8x', not an integer");
}

// The shipped policy loads with the current feature version, was trained at p=4, and applies at p=8: a valid
// order no worse than its heuristic by more than a few percent, noise-free.
TEST(PolicyShipped, LoadsAndCarriesOverToP8) {
  const std::string path = std::string(CONDUCTOR_SOURCE_DIR) + "/inputs/policies/default.pt";
  const policy::Policy pol = policy::load_policy(path);
  for (int m : {24, 64}) {
    const sched::CostModel cost = sched::uniform_cost(1, 1, 1, 0.05, 0.5);
    const sched::Schedule s = sched::generate("zb-2p", 8, m, 1, cost);
    policy::EnvOptions env;
    env.heuristic = pol.heuristic;
    env.memory_limit = 16;
    env.memory_after_b = 0.5;
    auto compute = [&](int r, const sched::Action& a) { return cost.op_time(r, a.kind, 1); };
    auto comm = [&](const sched::Transfer&) { return cost.comm_time(); };
    sched::Schedule order;
    const double learned = policy::greedy_makespan(pol, s, env, cost, compute, comm, &order);
    const double heuristic =
        policy::rollout(s, env, cost, compute, comm, [](const policy::Decision&) { return 0; }).makespan();
    EXPECT_TRUE(sched::validate(order, 16, 0.5).ok) << "m=" << m;
    EXPECT_LE(learned, heuristic * 1.03) << "m=" << m;
  }
}

// The ppo planner: orders keep p, m, v and validate; the online estimate learns a persistent straggler and the
// noise level from the measured times; its orders never do worse than the static generator order (the
// straggler is the bottleneck here, so no order does much better: the gain is the migration tier's job).
TEST(PolicyScheduler, ReplansFromMeasuredTimes) {
  const policy::Policy pol = policy::Policy::initial(16, sched::Hint::BFW, 2);
  for (const char* exec : {"strict", "readiness"}) {
    config::Deck deck = deck_of({"parallel.pipeline=4", "parallel.microbatches=12", "schedule.kind=zb-2p",
                                 std::string("schedule.execution=") + exec, "schedule.hint=bfw", "cost.comm=0.05",
                                 "noise.kind=[gaussian, straggler]", "noise.level=0.05", "noise.straggler_rank=1",
                                 "noise.straggler_factor=1.6", "trace.enabled=false", "scheduler.kind=ppo"});
    const sched::Schedule gen = sched::make_schedule(config::resolve(deck));
    const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), gen);
    const sim::SimOptions opt = sim::SimOptions::from_plan(config::resolve(deck), gen);
    auto ppo = policy::make_ppo_planner(config::resolve(deck), gen, pol);
    int checked = 0;
    const auto with_ppo =
        sim::simulate_with_planner(noise, opt, 12, *ppo, [&](const sim::StepResult& r, const sched::Schedule& s) {
          EXPECT_EQ(s.p, gen.p);
          EXPECT_EQ(s.m, gen.m);
          EXPECT_TRUE(
              sched::validate(s, sched::memory_limit_for(config::resolve(deck), gen), deck.cost.memory_after_b).ok);
          EXPECT_TRUE(r.events.empty());  // trace.enabled=false: the caller asked for none
          ++checked;
        });
    EXPECT_EQ(checked, 12);
    EXPECT_EQ(with_ppo.latency_ms.size(), 11u);  // initial_order + orders for steps 2..11
    const policy::PpoStats* st = policy::ppo_stats(*ppo);
    ASSERT_NE(st, nullptr);
    EXPECT_NEAR(st->estimated_level, 0.05, 0.03);
    ASSERT_EQ(st->estimate.forward.size(), 4u);
    EXPECT_NEAR(st->estimate.forward[1] / st->estimate.forward[0], 1.6, 0.15);
    EXPECT_NEAR(st->estimate.backward_weight[1] / st->estimate.backward_weight[2], 1.6, 0.15);
    EXPECT_NEAR(st->estimate.comm, 0.05, 0.01);
    sched::StaticPlanner fixed_planner(gen);
    EXPECT_EQ(policy::ppo_stats(fixed_planner), nullptr);
    const auto fixed = sim::simulate_with_planner(noise, opt, 12, fixed_planner);
    EXPECT_LE(with_ppo.run.mean_makespan_ms, fixed.run.mean_makespan_ms * 1.005) << exec;
  }
}

// Without noise the planner's check of its order against the generator's is exact, so its order is never slower.
// With migration it was: the check executed both orders without the transfer estimate the run's decisions use
// (the offers' windows), predicted other helps than the run made, and kept a policy order 7.8% slower.
TEST(PolicyScheduler, NoiseFreeWithMigrationNeverSlowerThanTheGenerator) {
  const policy::Policy pol = policy::load_policy(std::string(CONDUCTOR_SOURCE_DIR) + "/inputs/policies/default.pt");
  for (const char* hint : {"bfw", "bf"}) {
    config::Deck deck =
        deck_of({"parallel.pipeline=8", "parallel.microbatches=16", "schedule.kind=1f1b",
                 "schedule.execution=readiness", std::string("schedule.hint=") + hint, "migration.enabled=true",
                 "cost.comm=0.07", "noise.kind=none", "trace.enabled=false", "scheduler.kind=ppo"});
    const auto [with_ppo, fixed] = ppo_against_generator(deck, pol, 2);
    EXPECT_LE(with_ppo.mean_makespan_ms, fixed.mean_makespan_ms) << hint;
  }
}

// With post-validated (overlapping) steps the check compares two-step windows: a policy order whose every step ends
// as soon as the generator's but overlaps the next one worse ran 4.2% slower (588.25 against 612.75 ms over 8 steps
// of this deck) when the check timed one step.
TEST(PolicyScheduler, NoiseFreeWithPostValidationNeverSlowerThanTheGenerator) {
  const policy::Policy pol = policy::load_policy(std::string(CONDUCTOR_SOURCE_DIR) + "/inputs/policies/default.pt");
  config::Deck deck = deck_of({"model.n_layers=8", "parallel.pipeline=8", "parallel.microbatches=24",
                               "schedule.kind=zb-2p", "schedule.execution=strict", "schedule.post_validation=true",
                               "cost.forward=1", "cost.backward_input=1", "cost.backward_weight=1", "cost.comm=0.05",
                               "noise.kind=none", "trace.enabled=false", "scheduler.kind=ppo"});
  const auto [with_ppo, fixed] = ppo_against_generator(deck, pol, 8);
  EXPECT_GT(fixed.span_ms, 0);
  EXPECT_LE(with_ppo.span_ms, fixed.span_ms);
}

// The control loop's one-step lag, as at run time: the order planned from step k's events runs at step k+2
// (steps 0 and 1 run the initial order), and every order is planned from the events of the step it names.
TEST(PolicyScheduler, ControlLoopPlansOneStepAhead) {
  config::Deck deck =
      deck_of({"parallel.pipeline=4", "parallel.microbatches=8", "schedule.kind=zb-h1", "trace.enabled=false"});
  const sched::Schedule gen = sched::make_schedule(config::resolve(deck));
  struct Recorder final : sched::OrderPlanner {
    sched::Schedule base;
    std::vector<int> observed_steps;
    std::vector<std::size_t> observed_events;
    const char* name() const override { return "recorder"; }
    sched::Schedule initial_order() override {
      sched::Schedule s = base;
      s.name = "initial";
      return s;
    }
    sched::Schedule next_order(const sched::StepObservation& obs) override {
      observed_steps.push_back(obs.step);
      observed_events.push_back(obs.events ? obs.events->size() : 0);
      sched::Schedule s = base;
      s.name = "from-" + std::to_string(obs.step);
      return s;
    }
  } rec;
  rec.base = gen;
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), gen);
  const sim::SimOptions opt = sim::SimOptions::from_plan(config::resolve(deck), gen);
  std::vector<std::string> ran;
  const auto run = sim::simulate_with_planner(
      noise, opt, 6, rec, [&](const sim::StepResult&, const sched::Schedule& s) { ran.push_back(s.name); });
  EXPECT_EQ(ran, (std::vector<std::string>{"initial", "initial", "from-0", "from-1", "from-2", "from-3"}));
  EXPECT_EQ(rec.observed_steps, (std::vector<int>{0, 1, 2, 3}));
  for (std::size_t n : rec.observed_events) EXPECT_GE(n, static_cast<std::size_t>(4 * 8 * 3));  // every compute op
  EXPECT_EQ(run.latency_ms.size(), 5u);
}

// The planner runs on its own thread at run time and limits LibTorch to one thread there only: rank 0's main
// thread keeps its OpenMP threads for the CPU trainer (a scheduler that set them globally made rank 0's stage
// single-threaded).
TEST(PolicyScheduler, PlanningLeavesTheCallersThreadsAlone) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  config::Deck deck = deck_of({"parallel.pipeline=4", "parallel.microbatches=8", "schedule.kind=zb-2p",
                               "scheduler.kind=ppo", "trace.enabled=false"});
  const sched::Schedule gen = sched::make_schedule(config::resolve(deck));
  auto planner = policy::make_ppo_planner(config::resolve(deck), gen);  // loads the shipped policy
  sched::Schedule first = planner->initial_order();
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), gen);
  sim::SimOptions opt = sim::SimOptions::from_plan(config::resolve(deck), gen);
  opt.record_events = true;
  double clock = 0;
  const sim::StepResult r = sim::simulate_step(first, noise, opt, 0, clock);
  std::thread planning([&] {
    sched::StepObservation obs;
    obs.step = 0;
    obs.order = &first;
    obs.events = &r.events;
    const sched::Schedule next = planner->next_order(obs);
    EXPECT_EQ(next.m, gen.m);
  });
  planning.join();
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(before);
}

// The environment runs the local tier when the deck enables it (EnvOptions::migration from env_migration): a
// rollout with the heuristic's choices is readiness execution with the same migration (decisions on the predicted
// costs, a helper at its actual speed), and on a deck whose LM-head stage is heavy it migrates and ends sooner
// than the rollout without it.
TEST(PolicyEnv, RolloutMigratesWhenTheDeckEnablesIt) {
  config::LoadOptions o;
  o.command = config::Command::Simulate;
  o.overrides = {"model.d_model=256",       "model.n_heads=8",     "model.n_layers=8",        "model.seq_len=128",
                 "model.vocab=16384",       "parallel.pipeline=4", "parallel.microbatches=8", "schedule.kind=zb-2p",
                 "cost.device_tflops=0.05", "cost.comm=0.01",      "migration.enabled=true",  "migration.link=nvlink",
                 "trace.enabled=false"};
  const plan::Plan plan = config::resolve(config::parse_deck("", o));
  const policy::TrainSetup su = [&] {
    policy::TrainSetup t;
    t.base = sched::make_schedule(plan);
    t.cost = plan.costs;
    t.env.migration = policy::env_migration(plan, t.base);
    return t;
  }();
  ASSERT_EQ(su.env.migration.size(), 4u);
  policy::EpisodeDraw draw;
  draw.seed = 7;
  draw.level = 0.1;
  draw.cost = su.cost;
  const auto compute = policy::draw_compute(draw, 1);
  const auto comm = policy::draw_comm(draw);
  const auto first = [](const policy::Decision&) { return 0; };
  const auto on = policy::rollout(su.base, su.env, draw.cost, compute, comm, first);
  policy::EnvOptions off_env = su.env;
  off_env.migration.clear();
  const auto off = policy::rollout(su.base, off_env, draw.cost, compute, comm, first);
  EXPECT_LT(on.makespan(), 0.98 * off.makespan());
  sched::ExecOptions eo;
  eo.execution = sched::Execution::Readiness;
  eo.hint = su.env.heuristic;
  eo.migration = su.env.migration;
  eo.estimate = [&](int r, const sched::Action& a) { return draw.cost.op_time(r, a.kind, 1); };
  eo.helper_speed = [&](int r, const sched::Action& a) { return compute(r, a) / draw.cost.op_time(r, a.kind, 1); };
  const auto ex = sched::execute(su.base, eo, compute, comm);
  EXPECT_FALSE(ex.migrations.empty());
  EXPECT_EQ(on.order, ex.order);
  EXPECT_DOUBLE_EQ(on.makespan(), ex.makespan());
}
