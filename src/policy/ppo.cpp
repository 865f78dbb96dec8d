#include "conductor/policy/ppo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <torch/types.h>  // first: clip_grad.h needs it and does not include it

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>

#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/util/error.hpp"
#include "nets.hpp"

// OpenBLAS's own (cblas.h declares it too; that header beside LibTorch's in this unity build is not worth its
// clashes): the BLAS LibTorch's matmuls run in on Debian.
extern "C" void openblas_set_num_threads(int num_threads);

namespace conductor::policy {

TrainSetup setup_from_deck(const config::Deck& deck) {
  const plan::Plan plan = config::resolve(deck);
  TrainSetup su;
  su.base = sched::make_schedule(plan);
  su.cost = plan.costs;
  su.env.memory_limit = sched::memory_limit_for(plan, su.base);
  su.env.memory_after_b = su.cost.memory_after_b;
  su.env.heuristic = sched::parse_hint(deck.policy.heuristic);
  su.env.migration = env_migration(plan, su.base);  // training with the local tier when the deck enables it
  // With post-validation steps overlap: an episode is a window of two steps, so the policy sees (and is
  // rewarded for) the next step's forwards running beside this step's tail.
  su.env.overlap_steps = plan.schedule.post_validation;
  su.env.steps = su.env.overlap_steps ? 2 : 1;
  su.ppo = deck.policy;
  return su;
}

sched::ComputeTimeFn draw_compute(const EpisodeDraw& draw, int v) {
  return [&draw, v](int rank, const sched::Action& a) {
    const double base = draw.cost.op_time(rank, a.kind, v);
    if (draw.level <= 0) return base;
    const double z = sim::hash_normal(
        sim::hash_words({draw.seed, 1, static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(a.chunk),
                         static_cast<std::uint64_t>(a.microbatch), static_cast<std::uint64_t>(a.kind)}));
    return base * std::max(0.05, 1.0 + draw.level * z);
  };
}

sched::CommTimeFn draw_comm(const EpisodeDraw& draw) {
  return [&draw](const sched::Transfer& t) {
    const double base = draw.cost.comm_time();
    if (draw.level <= 0 || base <= 0) return base;
    const double z = sim::hash_normal(
        sim::hash_words({draw.seed, 2, static_cast<std::uint64_t>(t.from_stage), static_cast<std::uint64_t>(t.to_stage),
                         static_cast<std::uint64_t>(t.microbatch)}));
    return base * std::max(0.05, 1.0 + draw.level * z);
  };
}

double greedy_makespan(const Policy& policy, const sched::Schedule& base, const EnvOptions& env,
                       const sched::CostModel& predicted, const sched::ComputeTimeFn& compute,
                       const sched::CommTimeFn& comm, sched::Schedule* order) {
  const Rollout ro = rollout(base, env, predicted, compute, comm, [&](const Decision& d) { return policy.greedy(d); });
  if (order) {
    *order = base;
    for (int r = 0; r < base.p; ++r) {
      order->ranks[r].clear();
      for (int i : ro.order[r]) order->ranks[r].push_back(base.ranks[r][i]);
    }
  }
  return ro.makespan();
}

namespace {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
double normal(std::mt19937_64& rng) {
  // Box-Muller on our own uniforms (std::normal_distribution differs between standard libraries).
  const double u1 = std::max(uniform01(rng), 1e-300), u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

EpisodeDraw make_draw(const TrainSetup& su, std::mt19937_64& rng) {
  EpisodeDraw d;
  d.seed = rng();
  const auto& lv = su.ppo.noise_levels;
  const double lo = lv.empty() ? 0.0 : lv[0], hi = lv.size() > 1 ? lv[1] : lo;
  d.level = lo + (hi - lo) * uniform01(rng);
  const int p = su.base.p, v = su.base.v;
  d.cost = su.cost;
  d.cost.forward.assign(p, 0);
  d.cost.backward_input.assign(p, 0);
  d.cost.backward_weight.assign(p, 0);
  for (int r = 0; r < p; ++r) {
    // op_time is per chunk (1/v of the rank's share); the cost model stores whole-rank times.
    d.cost.forward[r] = su.cost.op_time(r, sched::OpKind::F, v) * v * std::exp(su.ppo.cost_spread * normal(rng));
    d.cost.backward_input[r] = su.cost.op_time(r, sched::OpKind::B, v) * v * std::exp(su.ppo.cost_spread * normal(rng));
    d.cost.backward_weight[r] =
        su.cost.op_time(r, sched::OpKind::W, v) * v * std::exp(su.ppo.cost_spread * normal(rng));
  }
  return d;
}

}  // namespace

namespace {

// One iteration's experience: every decision of its episodes, each decision's reward, and where episodes end.
struct Experience {
  std::vector<Decision> dec;
  std::vector<float> reward;
  std::vector<int> episode_last;  // index of each episode's last decision
  void clear() {
    dec.clear();
    reward.clear();
    episode_last.clear();
  }
};

// A softmax draw over the policy's scores of the decision's candidates.
int sample_candidate(const Policy& pol, const Decision& d, std::mt19937_64& rng) {
  float s[kMaxCandidates];
  pol.scores(d, s);
  const float mx = *std::max_element(s, s + d.num_candidates);
  double z = 0;
  for (int k = 0; k < d.num_candidates; ++k) z += std::exp(static_cast<double>(s[k] - mx));
  double u = uniform01(rng) * z;
  for (int k = 0; k < d.num_candidates; ++k) {
    u -= std::exp(static_cast<double>(s[k] - mx));
    if (u <= 0) return k;
  }
  return d.num_candidates - 1;
}

// Runs the iteration's episodes with the sampling policy; the makespans (sampled, heuristic, greedy) go to stats.
// `work` (one rank's step of work) scales the rewards.
// Returns false when `stop` ended it early (the experience is then incomplete).
bool collect(const TrainSetup& su, const Policy& pol, double work, std::mt19937_64& rng, Experience& x,
             IterationStats& stats, const std::function<bool()>& stop) {
  const config::PolicyConfig& c = su.ppo;
  const int v = su.base.v;
  for (int e = 0; e < c.episodes; ++e) {
    if (stop && stop()) return false;
    const EpisodeDraw draw = make_draw(su, rng);
    const auto compute = draw_compute(draw, v);
    const auto comm = draw_comm(draw);
    const std::size_t first = x.dec.size();
    const Rollout ro = rollout(
        su.base, su.env, draw.cost, compute, comm, [&](const Decision& d) { return sample_candidate(pol, d, rng); },
        &x.dec);
    stats.sampled_makespan += ro.makespan() / c.episodes;
    stats.heuristic_makespan +=
        rollout(su.base, su.env, draw.cost, compute, comm, [](const Decision&) { return 0; }).makespan() / c.episodes;
    stats.greedy_makespan += greedy_makespan(pol, su.base, su.env, draw.cost, compute, comm) / c.episodes;
    if (x.dec.size() == first) continue;
    // Reward of decision t: minus the idle rank-time from it to the next decision (to the end for the last),
    // so an episode's return is minus its bubble (p x makespan - work) in units of one rank's step work.
    for (std::size_t t = first; t < x.dec.size(); ++t) {
      const double next = t + 1 < x.dec.size() ? x.dec[t + 1].idle : ro.idle();
      x.reward.push_back(static_cast<float>(-(next - x.dec[t].idle) / work));
    }
    x.episode_last.push_back(static_cast<int>(x.dec.size()) - 1);
  }
  return true;
}

// The decisions as tensors: candidates' features X [N, C, F], their mask [N, C], global features G [N, G] and
// the chosen candidate act [N].
struct Batch {
  torch::Tensor X, mask, G, act;
};

Batch to_batch(const std::vector<Decision>& dec) {
  const int N = static_cast<int>(dec.size());
  Batch b{torch::zeros({N, kMaxCandidates, kNumFeatures}), torch::zeros({N, kMaxCandidates}, torch::kBool),
          torch::empty({N, kNumGlobal}), torch::empty({N}, torch::kLong)};
  auto xa = b.X.accessor<float, 3>();
  auto ma = b.mask.accessor<bool, 2>();
  auto ga = b.G.accessor<float, 2>();
  auto aa = b.act.accessor<std::int64_t, 1>();
  for (int n = 0; n < N; ++n) {
    const Decision& d = dec[n];
    for (int k = 0; k < d.num_candidates; ++k) {
      ma[n][k] = true;
      for (int f = 0; f < kNumFeatures; ++f) xa[n][k][f] = d.features[static_cast<std::size_t>(k) * kNumFeatures + f];
    }
    for (int g = 0; g < kNumGlobal; ++g) ga[n][g] = d.global[g];
    aa[n] = d.chosen;
  }
  return b;
}

// GAE per episode, backwards from its last decision (terminal: next value 0): advantages and returns.
void advantages(const Experience& x, const torch::Tensor& values, const config::PolicyConfig& c,
                std::vector<float>& adv, std::vector<float>& ret) {
  auto va = values.accessor<float, 1>();
  int start = 0;
  for (int last : x.episode_last) {
    double gae = 0.0, next_v = 0.0;
    for (int t = last; t >= start; --t) {
      const double delta = x.reward[t] + c.gamma * next_v - va[t];
      gae = delta + c.gamma * c.lambda * gae;
      adv[t] = static_cast<float>(gae);
      ret[t] = static_cast<float>(gae + va[t]);
      next_v = va[t];
    }
    start = last + 1;
  }
}

// The networks and their optimizer, trained together.
struct Learner {
  detail::Actor actor;
  detail::Critic critic;
  std::vector<torch::Tensor> params;
  torch::optim::Adam opt;

  static std::vector<torch::Tensor> all_params(detail::Actor& a, detail::Critic& c) {
    std::vector<torch::Tensor> p = a->parameters();
    for (auto& t : c->parameters()) p.push_back(t);
    return p;
  }
  Learner(int hidden, double lr)
      : actor(hidden), critic(hidden), params(init(actor, critic)), opt(params, torch::optim::AdamOptions(lr)) {}
  static std::vector<torch::Tensor> init(detail::Actor& a, detail::Critic& c) {
    detail::init_heuristic(a);
    return all_params(a, c);
  }

  // PPO's clipped update over the experience: c.epochs passes of shuffled minibatches. Losses go to stats.
  void update(const Experience& x, const config::PolicyConfig& c, IterationStats& stats) {
    const int N = static_cast<int>(x.dec.size());
    const Batch b = to_batch(x.dec);
    torch::Tensor old_logp, values;
    {
      torch::NoGradGuard ng;
      values = critic(b.G);
      auto logits = actor(b.X).masked_fill(b.mask.logical_not(), -1e9);
      old_logp = torch::log_softmax(logits, -1).gather(1, b.act.unsqueeze(1)).squeeze(1);
    }
    std::vector<float> adv(N), ret(N);
    advantages(x, values, c, adv, ret);
    auto A = torch::from_blob(adv.data(), {N}, torch::kFloat32).clone();
    auto R = torch::from_blob(ret.data(), {N}, torch::kFloat32).clone();
    A = (A - A.mean()) / (A.std(/*unbiased=*/false) + 1e-8);
    int updates = 0;
    for (int ep = 0; ep < c.epochs; ++ep) {
      auto perm = torch::randperm(N, torch::kLong);
      for (int s0 = 0; s0 < N; s0 += c.minibatch) {
        auto idx = perm.slice(0, s0, std::min(N, s0 + c.minibatch));
        auto mb_mask = b.mask.index_select(0, idx);
        auto logits = actor(b.X.index_select(0, idx)).masked_fill(mb_mask.logical_not(), -1e9);
        auto logp_all = torch::log_softmax(logits, -1);
        auto logp = logp_all.gather(1, b.act.index_select(0, idx).unsqueeze(1)).squeeze(1);
        auto ratio = torch::exp(logp - old_logp.index_select(0, idx));
        auto a = A.index_select(0, idx);
        auto surr = torch::min(ratio * a, torch::clamp(ratio, 1.0 - c.clip, 1.0 + c.clip) * a);
        auto policy_loss = -surr.mean();
        auto entropy = -(torch::softmax(logits, -1) * logp_all).masked_fill(mb_mask.logical_not(), 0).sum(-1).mean();
        auto value_loss = torch::mse_loss(critic(b.G.index_select(0, idx)), R.index_select(0, idx));
        auto loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy;
        opt.zero_grad();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(params, c.grad_clip);
        opt.step();
        stats.policy_loss += policy_loss.item<double>();
        stats.value_loss += value_loss.item<double>();
        stats.entropy += entropy.item<double>();
        ++updates;
      }
    }
    if (updates > 0) {
      stats.policy_loss /= updates;
      stats.value_loss /= updates;
      stats.entropy /= updates;
    }
  }
};

}  // namespace

TrainResult train_ppo(const TrainSetup& su, const std::function<void(const IterationStats&)>& on_iteration,
                      const std::function<bool()>& stop) {
  const config::PolicyConfig& c = su.ppo;
  const auto t0 = std::chrono::steady_clock::now();
  // One thread for LibTorch's own loops and for the BLAS its matmuls call (OpenBLAS, which sizes its threads from
  // OMP_NUM_THREADS): with one thread and with several its sums round differently, so the same deck trained to
  // other policy bytes on nodes of other core counts (docs/migration.md: training is deterministic).
  torch::set_num_threads(1);
  openblas_set_num_threads(1);
  torch::manual_seed(c.seed);
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ULL + 1);
  Learner learner(c.hidden, c.learning_rate);
  const double work = time_unit(su.cost, su.base.v) * 3.0 * su.base.v * su.base.m;  // one rank's step of work

  TrainResult result;
  Experience x;
  for (int it = 0; it < c.iterations; ++it) {
    const Policy pol = detail::to_policy(learner.actor, learner.critic, su.env.heuristic);
    x.clear();
    IterationStats stats;
    stats.iteration = it;
    if (!collect(su, pol, work, rng, x, stats, stop)) {
      result.stopped = true;
      break;
    }
    stats.decisions = static_cast<int>(x.dec.size());
    if (!x.dec.empty()) learner.update(x, c, stats);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.curve.push_back(stats);
    if (on_iteration) on_iteration(stats);
  }
  result.policy = detail::to_policy(learner.actor, learner.critic, su.env.heuristic);
  return result;
}

}  // namespace conductor::policy
