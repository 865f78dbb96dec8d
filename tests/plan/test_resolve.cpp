// config::resolve: every derived default computed once, and the same value the deck shows in resolved.yaml.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;

namespace {

config::Deck parsed(std::vector<std::string> overrides) {
  config::LoadOptions o;
  o.overrides = std::move(overrides);
  o.command = config::Command::Simulate;
  return config::parse_deck("", o);
}

}  // namespace

// A deck as parsed (finalize writes the derived keys back) and the same deck built in code (nothing written
// back) resolve to the same plan numbers: resolve is where the defaults come from.
TEST(Resolve, DerivedDefaultsEqualWhatTheParsedDeckShows) {
  for (const std::string kind : {"1f1b", "zb-2p", "gpipe", "zb-h2"}) {
    const config::Deck deck = parsed({"schedule.kind=" + kind, "parallel.pipeline=3", "parallel.microbatches=7"});
    config::Deck raw;
    raw.schedule.kind = kind;
    raw.parallel.pipeline = 3;
    raw.parallel.microbatches = 7;
    const plan::Plan a = config::resolve(deck), b = config::resolve(raw);
    ASSERT_EQ(a.memory.rank_limit.size(), 3u) << kind;
    EXPECT_EQ(a.memory.rank_limit, b.memory.rank_limit) << kind;
    EXPECT_EQ(a.memory.rank_limit[2], deck.schedule.memory_limit) << kind;
    EXPECT_EQ(a.memory.rank_limit[0], plan::default_memory_limit(kind, 3, 7, 1)) << kind;
    EXPECT_EQ(a.costs.memory_after_b, deck.cost.memory_after_b) << kind;
    EXPECT_EQ(b.costs.memory_after_b, plan::memory_after_b_from_model(64, 4, 64)) << kind;
  }
}

TEST(Resolve, GivenValuesWin) {
  const plan::Plan p = config::resolve(
      parsed({"schedule.memory_limit=2.5", "cost.memory_after_b=0.25", "optim.decay_steps=7", "run.steps=3"}));
  EXPECT_EQ(p.memory.rank_limit, std::vector<double>(4, 2.5));
  EXPECT_EQ(p.costs.memory_after_b, 0.25);
  EXPECT_EQ(p.optim.decay_steps, 7);
  EXPECT_EQ(config::resolve(parsed({"run.steps=3"})).optim.decay_steps, 3);  // 0 = run.steps
}

// Costs from the model dimensions and bandwidth; the simulator and the generators see only the result.
TEST(Resolve, CostsFromTheModelAndBandwidth) {
  const config::Deck deck = parsed(
      {"cost.device_tflops=100", "cost.bandwidth_gbps=10", "cost.comm=0.5", "parallel.pipeline=2", "model.n_layers=3"});
  const plan::Plan p = config::resolve(deck);
  ASSERT_EQ(p.costs.forward.size(), 2u);
  // Rank 0: two of the three layers, F = 2 (24 tokens h^2 + 4 tokens s h) FLOPs at 1e11 FLOP/ms.
  const double tokens = 4.0 * 64, h = 64, s = 64;
  EXPECT_DOUBLE_EQ(p.costs.forward[0], 2 * (24 * tokens * h * h + 4 * tokens * s * h) / 1e11);
  EXPECT_DOUBLE_EQ(p.costs.backward_weight[0], 2 * 24 * tokens * h * h / 1e11);
  EXPECT_EQ(p.activation_bytes, 4.0 * 4 * 64 * 64);
  EXPECT_DOUBLE_EQ(p.costs.comm, 0.5 + p.activation_bytes / 10e9 * 1e3);
  EXPECT_EQ(config::resolve(parsed({"trace.enabled=false"})).trace.comm_events, false);
}

// The MLP's share of the cost follows model.mlp_ratio (2 r h^2 per token in each of its two matmuls), as in MFU.
TEST(Resolve, CostsFollowTheMlpRatio) {
  const plan::Plan p = config::resolve(
      parsed({"cost.device_tflops=100", "model.mlp_ratio=2", "parallel.pipeline=2", "model.n_layers=2"}));
  const double tokens = 4.0 * 64, h = 64;
  EXPECT_DOUBLE_EQ(p.costs.backward_weight[0], 2 * (4 + 2 * 2) * tokens * h * h / 1e11);
}

// A listed split with virtual chunks gives each rank its stages' layers (it was read as the even split: [3, 1, 1, 1]
// over two ranks timed as 3 + 3 layers, not 4 + 2), by the schedule's placement.
TEST(Resolve, ListedSplitWithVirtualChunksTimesEachRanksLayers) {
  const std::vector<std::string> base = {"cost.device_tflops=100", "parallel.pipeline=2", "parallel.virtual=2",
                                         "model.n_layers=6", "parallel.microbatches=4"};
  auto with = [&](const std::string& kind, const std::string& split) {
    std::vector<std::string> o = base;
    o.push_back("schedule.kind=" + kind);
    o.push_back("model.layers_per_stage=" + split);
    return parsed(o);
  };
  const config::Deck loop = with("1f1b-interleaved", "[3, 1, 1, 1]");  // rank 0: stages 0, 2; rank 1: 1, 3
  EXPECT_EQ(config::rank_layers(loop, 0), 4);
  EXPECT_EQ(config::rank_layers(loop, 1), 2);
  const config::Deck v = with("zb-v", "[3, 1, 1, 1]");  // rank 0: stages 0, 3; rank 1: 1, 2
  EXPECT_EQ(config::rank_layers(v, 0), 4);
  EXPECT_EQ(config::rank_layers(v, 1), 2);
  const config::Deck even = with("1f1b-interleaved", "even");
  EXPECT_EQ(config::rank_layers(even, 0), 3);
  const plan::Costs c = config::costs_from_model(loop), e = config::costs_from_model(even);
  EXPECT_DOUBLE_EQ(c.backward_weight[0] / e.backward_weight[0], 4.0 / 3.0);  // W: the layers' matmuls alone
  EXPECT_LT(c.backward_weight[1], e.backward_weight[1]);  // 2 layers against 3, and the LM head in both
}

// A file: schedule without a limit has none in the plan; its limit is the loaded schedule's own peak.
TEST(Resolve, FileScheduleLimitComesFromTheSchedule) {
  config::Deck deck;
  deck.schedule.kind = "file:unused";
  const plan::Plan p = config::resolve(deck);
  EXPECT_TRUE(p.memory.rank_limit.empty());
  plan::Plan with_1f1b = p;
  with_1f1b.schedule.kind = "1f1b";
  const sched::Schedule s = sched::make_schedule(with_1f1b);  // unlimited: no rank limit in the plan
  const std::vector<double> limits = sched::rank_memory_limits(p, s);
  ASSERT_EQ(limits.size(), 4u);
  EXPECT_DOUBLE_EQ(limits[0], 4.0);  // 1F1B's rank 0 holds p microbatches
  EXPECT_DOUBLE_EQ(sched::memory_limit_for(p, s), 4.0);
}

namespace {

// The work of each stage of `split` (stage 0 adds first, the last stage adds last).
std::vector<double> stage_works(const std::vector<int>& split, const std::vector<double>& work, double first,
                                double last) {
  std::vector<double> out;
  std::size_t at = 0;
  for (std::size_t s = 0; s < split.size(); ++s) {
    double w = (s == 0 ? first : 0) + (s + 1 == split.size() ? last : 0);
    for (int k = 0; k < split[s]; ++k) w += work[at++];
    out.push_back(w);
  }
  return out;
}

// The heaviest stage of `split`.
double heaviest(const std::vector<int>& split, const std::vector<double>& work, double first, double last) {
  const std::vector<double> w = stage_works(split, work, first, last);
  return *std::max_element(w.begin(), w.end());
}

// How many stages of `split` weigh at least 95% of `worst` (balanced_split's second criterion).
int stages_at(const std::vector<int>& split, const std::vector<double>& work, double first, double last, double worst) {
  const std::vector<double> w = stage_works(split, work, first, last);
  return static_cast<int>(std::count_if(w.begin(), w.end(), [&](double x) { return x >= 0.95 * worst; }));
}

// Every split with at least one layer per stage (none allowed on the first stage when it carries work of its own,
// first > 0: an encoder), by recursion: the least heaviest stage, and the fewest stages within 5% of it among
// the splits that reach it.
std::pair<double, int> brute_force(const std::vector<double>& work, int stages, double first, double last) {
  const int L = static_cast<int>(work.size());
  std::vector<std::vector<int>> splits;
  std::vector<int> split(stages, 1);
  std::function<void(int, int)> place = [&](int s, int left) {
    if (s == stages - 1) {
      if (left < 1) return;
      split[s] = left;
      splits.push_back(split);
      return;
    }
    for (int k = s == 0 && first > 0 ? 0 : 1; k <= left - (stages - 1 - s); ++k) {
      split[s] = k;
      place(s + 1, left - k);
    }
  };
  place(0, L);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& x : splits) best = std::min(best, heaviest(x, work, first, last));
  int fewest = stages + 1;
  for (const auto& x : splits) {
    const double h = heaviest(x, work, first, last);
    if (std::abs(h - best) <= 1e-9 * best) fewest = std::min(fewest, stages_at(x, work, first, last, best));
  }
  return {best, fewest};
}

// balanced_split as it was before its inner loop stopped early: every cut j ascending, the latest of the least
// winning ties. The pruned one must choose the very same split.
std::vector<int> unpruned_split(const std::vector<double>& layer_work, int stages, double first, double last) {
  const int L = static_cast<int>(layer_work.size());
  const int z = first > 0 && stages > 1 ? 1 : 0;
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + layer_work[i];
  auto work = [&](int stage, int from, int to) {
    return prefix[to] - prefix[from] + (stage == 0 ? first : 0.0) + (stage == stages - 1 ? last : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(stages, std::vector<int>(L + 1, 0));
  const auto pass = [&](auto stage, auto combine) {
    for (auto& row : best) std::fill(row.begin(), row.end(), inf);
    for (int i = 1 - z; i <= L; ++i) best[0][i] = stage(0, 0, i);
    for (int s = 1; s < stages; ++s)
      for (int i = s + 1 - z; i <= L; ++i)
        for (int j = s - z; j < i; ++j) {
          const double c = combine(best[s - 1][j], stage(s, j, i));
          if (c <= best[s][i]) {
            best[s][i] = c;
            cut[s][i] = j;
          }
        }
  };
  pass(work, [](double a, double b) { return std::max(a, b); });
  const double heaviest = best[stages - 1][L], cap = heaviest * (1 + 1e-9), near = heaviest * 0.95;
  pass(
      [&](int stage, int from, int to) {
        const double w = work(stage, from, to);
        return w > cap ? inf : (w >= near ? 1.0 : 0.0);
      },
      [](double a, double b) { return a + b; });
  std::vector<int> split(stages, 0);
  for (int s = stages - 1, end = L; s >= 0; --s) {
    const int start = s == 0 ? 0 : cut[s][end];
    split[s] = end - start;
    end = start;
  }
  return split;
}

}  // namespace

TEST(BalancedSplit, PrunedSearchChoosesTheSameSplit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.5, 3.0);
  std::uniform_int_distribution<int> pick(0, 3);
  for (int L = 1; L <= 40; L += 3) {
    for (int S = 1; S <= std::min(L, 12); ++S) {
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<double> work(L);
        // equal layers (the decks'), random ones, and some of no work at all (ties everywhere)
        for (double& w : work) w = trial == 0 ? 1.0 : trial == 1 ? static_cast<double>(pick(rng)) : u(rng);
        const double first = trial % 2 ? u(rng) : 0.0, last = trial > 2 ? u(rng) * 2 : 0.0;
        EXPECT_EQ(config::balanced_split(work, S, first, last), unpruned_split(work, S, first, last))
            << "L=" << L << " S=" << S << " trial " << trial;
      }
    }
  }
}

TEST(BalancedSplit, EqualsBruteForceOnSmallCases) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.5, 3.0);
  for (int L = 1; L <= 9; ++L) {
    for (int S = 1; S <= L; ++S) {
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<double> work(L);
        for (double& w : work) w = trial == 0 ? 1.0 : u(rng);  // trial 0: equal layers, the deck's case
        const double first = trial < 2 ? 0.0 : u(rng), last = trial == 1 ? 2.5 : u(rng) * 2;
        const std::vector<int> split = config::balanced_split(work, S, first, last);
        ASSERT_EQ(split.size(), static_cast<std::size_t>(S));
        EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), L);
        for (std::size_t s = 0; s < split.size(); ++s) EXPECT_GE(split[s], s == 0 && first > 0 ? 0 : 1);
        const auto [least, fewest] = brute_force(work, S, first, last);
        const double worst = heaviest(split, work, first, last);
        EXPECT_NEAR(worst, least, 1e-9 * least) << "L=" << L << " S=" << S << " trial " << trial;
        EXPECT_EQ(stages_at(split, work, first, last, least), fewest) << "L=" << L << " S=" << S << " trial " << trial;
      }
    }
  }
  // Hand-checkable: 4 unit layers, a head of 2 on the last of 2 stages: [3, 1] (3 vs 3), not [2, 2] (2 vs 4).
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1}, 2, 0, 2), (std::vector<int>{3, 1}));
  // Among the splits with the least heaviest stage, the fewest stages within 5% of it: 7 unit layers over 3
  // stages is [3, 2, 2] (one stage of 3), not [3, 3, 1] (two); 8 unit layers and a head of 1.5 over 4 stages is
  // [3, 2, 2, 1] (one stage of 3; the head stage 2.5), not [3, 3, 1, 1]. A stage just below the heaviest counts
  // with it (gpt3-6.2b's shape: a head of 0.94 layers): 30 unit layers over 8 stages is [4, 4, 4, 4, 4, 4, 4, 2]
  // (seven stages of 4, the head stage 2.94), not [4, 4, 4, 4, 4, 4, 3, 3] (six of 4 and a head stage of 3.94).
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1, 1, 1, 1}, 3, 0, 0), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1, 1, 1, 1, 1}, 4, 0, 1.5), (std::vector<int>{3, 2, 2, 1}));
  EXPECT_EQ(config::balanced_split(std::vector<double>(30, 1.0), 8, 0, 0.94),
            (std::vector<int>{4, 4, 4, 4, 4, 4, 4, 2}));
  // Remaining ties go to earlier stages: 5 unit layers over 2 stages is [3, 2].
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1, 1}, 2, 0, 0), (std::vector<int>{3, 2}));
  // Work of its own on the first stage (an encoder) moves layers off it: 5 unit layers and an encoder of 3 on the
  // first of 2 stages is [1, 4] (4 vs 4), not [2, 3] (5 vs 3) nor [3, 2]; an encoder of 5 leaves it no layer:
  // [0, 4] (5 vs 4) rather than [1, 3] (6 vs 3). Without the encoder the same layers split [3, 2] and [2, 2].
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1, 1}, 2, 3, 0), (std::vector<int>{1, 4}));
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1}, 2, 5, 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(config::balanced_split({1, 1, 1, 1}, 2, 0, 0), (std::vector<int>{2, 2}));
  // Only the first stage may be empty, and only with an encoder: 2 layers over 3 stages need one.
  EXPECT_EQ(config::balanced_split({1, 1}, 3, 4, 0), (std::vector<int>{0, 1, 1}));
  EXPECT_THROW(config::balanced_split({1, 1}, 3, 0, 0), InputError);
}

// gpt3-1.5b's shape (22 layers, h 2304, s 1024, b 6, V 50304) on 8 stages: the balanced split's heaviest rank
// is no heavier than the even split's or the deck's [2, 3, ..., 3, 2], and the costs follow the split.
TEST(BalancedSplit, Gpt3LikeDeckIsNoHeavierThanTheEvenOrTheDeckSplit) {
  const std::vector<std::string> shape = {"model.vocab=50304",          "model.seq_len=1024",    "model.d_model=2304",
                                          "model.n_heads=24",           "model.n_layers=22",     "parallel.pipeline=8",
                                          "parallel.microbatch_size=6", "cost.device_tflops=150"};
  auto heaviest_rank = [](const plan::Plan& p) {
    double worst = 0;
    for (std::size_t r = 0; r < p.costs.forward.size(); ++r)
      worst = std::max(worst, p.costs.forward[r] + p.costs.backward_input[r] + p.costs.backward_weight[r]);
    return worst;
  };
  auto with = [&](const std::string& split) {
    std::vector<std::string> o = shape;
    o.push_back("model.layers_per_stage=" + split);
    return parsed(o);
  };
  const config::Deck balanced = with("balanced");
  EXPECT_EQ(balanced.model.layers_per_stage, (std::vector<int>{3, 3, 3, 3, 3, 3, 3, 1}));
  EXPECT_NE(config::to_yaml(balanced).find("layers_per_stage: [3, 3, 3, 3, 3, 3, 3, 1]"), std::string::npos);
  const double b = heaviest_rank(config::resolve(balanced));
  const double even = heaviest_rank(config::resolve(with("even")));
  const double listed = heaviest_rank(config::resolve(with("[2, 3, 3, 3, 3, 3, 3, 2]")));
  EXPECT_LE(b, even);
  EXPECT_LE(b, listed);
  EXPECT_LT(b, listed * 0.85);  // the head stage carried 1.23x the mean; balanced removes most of it
  // The deck's split with derived costs reproduces the deck's hand-written ones (F of the head stage 20.7 ms).
  EXPECT_NEAR(config::resolve(with("[2, 3, 3, 3, 3, 3, 3, 2]")).costs.forward[7], 20.7, 0.05);
}

// inputs/multimodal.yaml's shape: gpt3-1.5b's language model with a vision encoder on stage 0, stated as
// cost.encoder_tflop. The derived costs of the deck's split reproduce its hand-written lists (stage 0: 30, 32,
// 28 ms), and the balanced split sees the encoder: it moves layers off stage 0 and lightens the heaviest rank.
TEST(BalancedSplit, EncoderWorkOnTheFirstStageMovesLayersOffIt) {
  const std::vector<std::string> shape = {"model.vocab=50304",          "model.seq_len=1024",    "model.d_model=2304",
                                          "model.n_heads=24",           "model.n_layers=22",     "parallel.pipeline=8",
                                          "parallel.microbatch_size=6", "cost.device_tflops=150"};
  auto with = [&](const std::string& split, const std::string& encoder) {
    std::vector<std::string> o = shape;
    o.push_back("model.layers_per_stage=" + split);
    o.push_back("cost.encoder_tflop=" + encoder);
    return parsed(o);
  };
  auto total = [](const plan::Plan& p, int r) {
    const auto i = static_cast<std::size_t>(r);
    return p.costs.forward[i] + p.costs.backward_input[i] + p.costs.backward_weight[i];
  };
  auto heaviest_rank = [&](const plan::Plan& p) {
    double worst = 0;
    for (int r = 0; r < 8; ++r) worst = std::max(worst, total(p, r));
    return worst;
  };
  const std::string encoder = "[2.82, 3.0, 2.64]", deck_split = "[2, 3, 3, 3, 3, 3, 3, 2]";
  const plan::Plan listed = config::resolve(with(deck_split, encoder));
  EXPECT_NEAR(listed.costs.forward[0], 30.0, 0.05);
  EXPECT_NEAR(listed.costs.backward_input[0], 32.0, 0.05);
  EXPECT_NEAR(listed.costs.backward_weight[0], 28.0, 0.05);
  EXPECT_NEAR(listed.costs.forward[1], 16.8, 0.05);  // the encoder is stage 0's alone
  // The encoder (8.46 TFLOP, 56.4 ms: 3.36 layers' work) alone on stage 0; 22 layers and the head on 7 stages,
  // at most 4 layers (67.2 ms) each and as few of those as can be: two, not [0, 4, 4, 4, 4, 4, 1, 1]'s five.
  const config::Deck balanced = with("balanced", encoder);
  EXPECT_EQ(balanced.model.layers_per_stage, (std::vector<int>{0, 4, 4, 3, 3, 3, 3, 2}));
  const plan::Plan b = config::resolve(balanced);
  EXPECT_NEAR(total(b, 0), 56.4, 0.05);
  EXPECT_NEAR(heaviest_rank(b), total(b, 1), 1e-9);
  EXPECT_LT(heaviest_rank(b), heaviest_rank(listed) * 0.8);  // the deck's stage 0 carries 90 ms
  // Without the encoder the split is the language model's own, as before the key existed.
  EXPECT_EQ(with("balanced", "[0, 0, 0]").model.layers_per_stage, (std::vector<int>{3, 3, 3, 3, 3, 3, 3, 1}));
}

TEST(BalancedSplit, ErrorsNameTheKey) {
  auto message = [](std::vector<std::string> o) {
    try {
      parsed(std::move(o));
    } catch (const DeckError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string no_costs = message({"model.layers_per_stage=balanced"});
  EXPECT_NE(no_costs.find("model.layers_per_stage = balanced needs"), std::string::npos) << no_costs;
  EXPECT_NE(no_costs.find("cost.device_tflops"), std::string::npos) << no_costs;
  const std::string few =
      message({"model.layers_per_stage=balanced", "cost.device_tflops=100", "model.n_layers=3", "parallel.pipeline=4"});
  EXPECT_NE(few.find("model.layers_per_stage: balanced needs at least one layer per stage"), std::string::npos) << few;
  EXPECT_NE(few.find("model.n_layers = 3"), std::string::npos) << few;
}
