// Deck keys of the global tier (PPO policy): scheduler.policy and friends (how `scheduler.kind: ppo` runs) and
// the ppo.* section (how `conductor train-policy` trains it).
#include "conductor/config/schema.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

void add_policy_fields(std::vector<Field>& f) {
  f.push_back(field<std::string>(
      "scheduler.policy", [](Deck & d) -> auto& { return d.policy.path; },
      "Policy file of `scheduler.kind: ppo` (written by `conductor train-policy`); empty = "
      "the shipped inputs/policies/default.pt. Set with another scheduler.kind, which reads no policy, or for "
      "`conductor train-policy`, which trains a new one, the deck is refused."));
  f.push_back(field<double>(
                  "scheduler.ema", [](Deck & d) -> auto& { return d.policy.ema; },
                  "ppo scheduler: weight of the last step's measured op times in the online cost "
                  "estimate (1 = only the last step). Set to another value with another scheduler.kind, the deck "
                  "is refused.")
                  .range(0.01, 1));
  f.push_back(field<int>(
                  "scheduler.verify_samples", [](Deck & d) -> auto& { return d.policy.verify_samples; },
                  "ppo scheduler: noise draws of the estimated cost model on which the policy's order is "
                  "checked against the generator's order (the better one is used); 0 = always the "
                  "policy's order. Set to another value with another scheduler.kind, the deck is refused.")
                  .range(0, 64));
  f.push_back(field<int>(
                  "ppo.iterations", [](Deck & d) -> auto& { return d.policy.iterations; },
                  "PPO iterations (collect episodes, then update).")
                  .range(0, 1e6));
  f.push_back(field<int>(
                  "ppo.episodes", [](Deck & d) -> auto& { return d.policy.episodes; },
                  "Episodes per iteration; an episode is one simulated step under a random noise draw.")
                  .range(1, 1e6));
  f.push_back(field<double>(
                  "ppo.learning_rate", [](Deck & d) -> auto& { return d.policy.learning_rate; }, "Adam learning rate.")
                  .range(1e-7, 1));
  f.push_back(
      field<double>(
          "ppo.clip", [](Deck & d) -> auto& { return d.policy.clip; }, "PPO clip range of the probability ratio.")
          .range(0.01, 1));
  f.push_back(field<double>(
                  "ppo.gamma", [](Deck & d) -> auto& { return d.policy.gamma; },
                  "Discount per decision (rewards are makespan increments; 1 = undiscounted).")
                  .range(0, 1));
  f.push_back(field<double>(
                  "ppo.lambda", [](Deck & d) -> auto& { return d.policy.lambda; }, "GAE lambda.")
                  .range(0, 1));
  f.push_back(
      field<double>(
          "ppo.entropy_coef", [](Deck & d) -> auto& { return d.policy.entropy_coef; }, "Weight of the entropy bonus.")
          .range(0, 10));
  f.push_back(field<double>(
                  "ppo.value_coef", [](Deck & d) -> auto& { return d.policy.value_coef; },
                  "Weight of the critic's squared error.")
                  .range(0, 100));
  f.push_back(field<double>(
                  "ppo.grad_clip", [](Deck & d) -> auto& { return d.policy.grad_clip; }, "Global gradient-norm clip.")
                  .range(1e-6, 1e6));
  f.push_back(
      field<int>(
          "ppo.epochs", [](Deck & d) -> auto& { return d.policy.epochs; }, "Passes over each iteration's decisions.")
          .range(1, 1000));
  f.push_back(field<int>(
                  "ppo.minibatch", [](Deck & d) -> auto& { return d.policy.minibatch; }, "Decisions per minibatch.")
                  .range(1, 1 << 24));
  f.push_back(field<int>(
                  "ppo.hidden", [](Deck & d) -> auto& { return d.policy.hidden; },
                  "Width of the actor's and critic's two hidden layers.")
                  .range(1, 256));
  f.push_back(field<unsigned long long>(
      "ppo.seed", [](Deck & d) -> auto& { return d.policy.seed; },
      "Seed of the weights, the noise draws and the sampled actions."));
  f.push_back(field<std::vector<double>>(
                  "ppo.noise_levels", [](Deck & d) -> auto& { return d.policy.noise_levels; },
                  "Domain randomisation: each episode's gaussian noise level is drawn "
                  "uniformly from [lo, hi]; one number: every episode at that level.")
                  .range(0, 10));
  f.push_back(field<double>(
                  "ppo.cost_spread", [](Deck & d) -> auto& { return d.policy.cost_spread; },
                  "Domain randomisation: each episode scales each rank's F, B and W cost by exp(spread * "
                  "z), z ~ N(0, 1): a log-normal sigma, at most 3 as noise.level's (at 10 the costs spread over "
                  "e^20 and training diverged).")
                  .range(0, 3));
  f.push_back(field<std::string>(
                  "ppo.heuristic", [](Deck & d) -> auto& { return d.policy.heuristic; },
                  "Ranking the policy is guided by (its rank is a feature; the untrained policy "
                  "follows it): schedule, bf, bfw or critical.")
                  .one_of({"schedule", "bf", "bfw", "critical"}));
  f.push_back(field<int>(
                  "ppo.eval_steps", [](Deck & d) -> auto& { return d.policy.eval_steps; },
                  "Simulated steps per method in the summary against the baselines.")
                  .range(1, 1e6));
}

void finalize_policy(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  // Only the ppo scheduler reads a policy file: beside another kind it was ignored, and the run it named was not
  // the one made (as schedule.placement beside a generator).
  if (!deck.policy.path.empty() && deck.scheduler.kind != "ppo") {
    problems.push_back(options.source_name + ": scheduler.policy = '" + deck.policy.path +
                       "' applies to scheduler.kind ppo only, and scheduler.kind = " + deck.scheduler.kind +
                       " reads no policy; set scheduler.kind=ppo to run that policy, or leave scheduler.policy "
                       "empty (scheduler.policy='')");
  }
  // train-policy trains a policy from its ppo.* keys; a policy named to plan with was ignored, silently.
  if (!deck.policy.path.empty() && options.command == Command::TrainPolicy) {
    problems.push_back(options.source_name + ": scheduler.policy = '" + deck.policy.path +
                       "' names a policy to plan with, which train-policy does not read (it trains a new one from "
                       "the ppo.* keys into run.output/policy.pt); leave scheduler.policy empty "
                       "(scheduler.policy='')");
  }
  // The same for the ppo scheduler's two tuning keys: set to anything but their defaults beside another kind they
  // changed nothing, silently.
  const PolicyConfig defaults;
  if (deck.scheduler.kind != "ppo") {
    const auto refuse = [&](const std::string& key, const std::string& value, const std::string& fallback) {
      problems.push_back(options.source_name + ": " + key + " = " + value +
                         " applies to scheduler.kind ppo only, and scheduler.kind = " + deck.scheduler.kind +
                         " does not read it; set scheduler.kind=ppo, or leave " + key + " at its default (" + key +
                         "=" + fallback + ")");
    };
    if (deck.policy.ema != defaults.ema)
      refuse("scheduler.ema", format_double(deck.policy.ema), format_double(defaults.ema));
    if (deck.policy.verify_samples != defaults.verify_samples)
      refuse("scheduler.verify_samples", std::to_string(deck.policy.verify_samples),
             std::to_string(defaults.verify_samples));
  }
  auto& lv = deck.policy.noise_levels;
  if (lv.size() == 1) lv.push_back(lv[0]);  // one level: [x, x]
  if (lv.size() != 2 || lv[0] > lv[1]) {
    std::string got;
    for (double x : lv) got += (got.empty() ? "" : ", ") + format_double(x);
    problems.push_back(options.source_name + ": ppo.noise_levels must be two values [lo, hi] with lo <= hi (got [" +
                       got + "])");
  }
}

}  // namespace conductor::config
