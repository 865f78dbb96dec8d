#include "conductor/sim/noise.hpp"

#include <algorithm>
#include <cmath>

#include "conductor/util/error.hpp"

namespace conductor::sim {

namespace {
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Salts keep the models' streams apart.
constexpr std::uint64_t kJitter = 0x6a09e667f3bcc908ULL, kHetero = 0xbb67ae8584caa73bULL,
                        kStraggler = 0x3c6ef372fe94f82bULL, kCongestion = 0xa54ff53a5f1d36f1ULL,
                        kSample = 0x9b05688c2b3e6c1fULL;
}  // namespace

std::uint64_t hash_words(std::initializer_list<std::uint64_t> words) {
  std::uint64_t h = 0x510e527fade682d1ULL;
  for (std::uint64_t w : words) h = mix(h ^ mix(w));
  return h;
}

double hash_uniform(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

double hash_normal(std::uint64_t h) {
  const double u1 = std::max(hash_uniform(mix(h ^ 1)), 1e-300);
  const double u2 = hash_uniform(mix(h ^ 2));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {

// The standard deviation of log f(z), z standard normal, f the per-op jitter factor: gaussian max(0.05, 1 + level
// z), lognormal exp(level z - level^2 / 2), or both on the same z (compute_factor). Simpson's rule over
// [-10, 10]; the kink at the gaussian's floor costs accuracy only in the fifth digit.
double jitter_log_sigma(double level, bool gaussian, bool lognormal) {
  if (!gaussian) return lognormal ? level : 0.0;
  constexpr int kIntervals = 4000;  // even
  constexpr double kLo = -10.0, kHi = 10.0, kH = (kHi - kLo) / kIntervals;
  double w_sum = 0.0, m1 = 0.0, m2 = 0.0;
  for (int i = 0; i <= kIntervals; ++i) {
    const double z = kLo + i * kH;
    const double w = (i == 0 || i == kIntervals ? 1.0 : (i % 2 ? 4.0 : 2.0)) * std::exp(-0.5 * z * z);
    const double l = std::log(std::max(0.05, 1.0 + level * z)) + (lognormal ? level * z : 0.0);
    w_sum += w, m1 += w * l, m2 += w * l * l;
  }
  const double mean = m1 / w_sum;
  return std::sqrt(std::max(0.0, m2 / w_sum - mean * mean));
}

}  // namespace

NoiseModel::NoiseModel(const sched::Schedule& s, sched::CostModel cost, const plan::Noise& noise)
    : p_(s.p), v_(s.v), placement_(s.placement), cost_(std::move(cost)), cfg_(noise) {
  for (const auto& k : noise.kind) {
    if (k == "gaussian")
      gaussian_ = true;
    else if (k == "lognormal")
      lognormal_ = true;
    else if (k == "sample")
      sample_ = true;
    else if (k == "heterogeneous")
      heterogeneous_ = true;
    else if (k == "straggler")
      straggler_ = true;
    else if (k == "congestion")
      congestion_ = true;
    else if (k != "none")
      throw InputError("noise.kind: unknown model '" + k + "'");
  }
  if (straggler_) {
    straggler_rank_ = noise.straggler_rank >= 0
                          ? noise.straggler_rank
                          : static_cast<int>(hash_words({noise.seed, kStraggler}) % static_cast<std::uint64_t>(p_));
    if (straggler_rank_ >= p_) {
      throw InputError("noise.straggler_rank = " + std::to_string(straggler_rank_) +
                       " is not a rank of p = " + std::to_string(p_));
    }
  }
  // Once per model (the integral costs 4000 logs), not per step.
  const double jitter = jitter_log_sigma(noise.level, gaussian_, lognormal_), m = sample_ ? noise.level : 0.0;
  duration_spread_ = std::sqrt(jitter * jitter + m * m);
  rank_factor_.assign(p_, 1.0);
  if (heterogeneous_) {
    for (int r = 0; r < p_; ++r) {
      rank_factor_[r] = std::exp(noise.level * hash_normal(hash_words({noise.seed, kHetero, std::uint64_t(r)})));
    }
  }
  if (congestion_) {
    if (noise.congestion_delay >= 0) {
      congestion_delay_ = noise.congestion_delay;
    } else {
      double mean_f = 0.0;
      for (int r = 0; r < p_; ++r) mean_f += cost_.op_time(r, sched::OpKind::F, v_);
      congestion_delay_ = noise.level * mean_f / p_;
    }
  }
}

NoiseModel NoiseModel::from_plan(const plan::Plan& plan, const sched::Schedule& schedule) {
  return NoiseModel(schedule, plan.costs, plan.noise);
}

double NoiseModel::compute_factor(int step, int rank, int chunk, int microbatch, sched::OpKind kind) const {
  double f = 1.0;
  if (gaussian_ || lognormal_) {
    const int stage = placement_ == sched::Placement::V ? (chunk == 0 ? rank : 2 * p_ - 1 - rank) : chunk * p_ + rank;
    const std::uint64_t h = hash_words({cfg_.seed, kJitter, std::uint64_t(step), std::uint64_t(stage),
                                        std::uint64_t(microbatch), std::uint64_t(kind)});
    const double z = hash_normal(h);
    if (gaussian_) f *= std::max(0.05, 1.0 + cfg_.level * z);
    if (lognormal_) f *= std::exp(cfg_.level * z - 0.5 * cfg_.level * cfg_.level);
  }
  if (sample_) {
    // Keyed by the step and the microbatch alone: every stage and kind of one microbatch draws the same z.
    const double z = hash_normal(hash_words({cfg_.seed, kSample, std::uint64_t(step), std::uint64_t(microbatch)}));
    f *= std::exp(cfg_.level * z - 0.5 * cfg_.level * cfg_.level);
  }
  if (heterogeneous_) f *= rank_factor_[rank];
  if (straggler_ && rank == straggler_rank_ && step >= cfg_.straggler_start &&
      (cfg_.straggler_steps == 0 || step < cfg_.straggler_start + cfg_.straggler_steps)) {
    f *= cfg_.straggler_factor;
  }
  return f;
}

// The log-normal sigma of an op's duration: what conductor run measures (MeasuredDurations::spread, the standard
// deviation of the logs of its ops' durations), so that backfilling switches at the same noise in both. A gaussian
// level is not that sigma beyond small levels (0.3: 0.357; 0.45: 0.655; the floor at 0.05 weighs in): passing the
// level made the simulator keep backfilling where the runtime, measuring, ranked critically.
double NoiseModel::duration_spread() const { return duration_spread_; }

double NoiseModel::arrival_spread() const {
  if (!congestion_ || congestion_delay_ <= 0) return 0.0;
  double mean_f = 0.0;
  for (int r = 0; r < p_; ++r) mean_f += cost_.op_time(r, sched::OpKind::F, v_) / p_;
  const double q = cfg_.congestion_prob;
  return mean_f > 0 ? congestion_delay_ * std::sqrt(q * (1 - q)) / mean_f : 0.0;
}

double NoiseModel::compute_time_ms(int step, int rank, int chunk, int microbatch, sched::OpKind kind) const {
  return cost_.op_time(rank, kind, v_) * compute_factor(step, rank, chunk, microbatch, kind);
}

double NoiseModel::comm_time_ms(int step, int from_stage, int to_stage, int microbatch, sched::Payload payload) const {
  auto rank_of = [&](int stage) {
    return placement_ == sched::Placement::V ? (stage < p_ ? stage : 2 * p_ - 1 - stage) : stage % p_;
  };
  const int from = rank_of(from_stage), to = rank_of(to_stage);
  if (from == to) return 0.0;
  double t = cost_.comm;
  if (congestion_ && congestion_delay_ > 0) {
    const std::uint64_t burst = static_cast<std::uint64_t>(microbatch / std::max(1, cfg_.congestion_burst));
    const std::uint64_t h = hash_words({cfg_.seed, kCongestion, std::uint64_t(step), std::uint64_t(from),
                                        std::uint64_t(to), std::uint64_t(payload), burst});
    if (hash_uniform(h) < cfg_.congestion_prob) t += congestion_delay_;
  }
  return t;
}

}  // namespace conductor::sim
