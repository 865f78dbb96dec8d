// `conductor train-policy DECK`, once cli has loaded the deck: PPO training of the global-tier policy in the
// simulator (policy/ppo.hpp). Part of the global tier's module (plugin/global_tier.hpp).
// Writes to run.output: resolved.yaml, policy.pt (the policy file), curve.csv (one row per iteration) and
// summary.csv / summary.txt (the trained policy against the deck's generator order, strict and readiness, under
// the deck's noise model).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "conductor/config/resolve.hpp"
#include "conductor/plugin/global_tier.hpp"
#include "conductor/policy/compare.hpp"
#include "conductor/policy/policy.hpp"
#include "conductor/policy/ppo.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/progress.hpp"
#include "conductor/util/text_file.hpp"

namespace conductor::plugin {

int train_policy(const config::Deck& deck) {
  const std::filesystem::path out = deck.run.output;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error("cannot create run.output '" + out.string() + "': " + ec.message());
  write_text_file(out / "resolved.yaml", config::resolved_yaml(deck));

  const policy::TrainSetup setup = policy::setup_from_deck(deck);
  char line[512];
  std::snprintf(line, sizeof line,
                "train-policy: %s p=%d m=%d v=%d, %d iterations x %d episodes, noise levels [%.3g, %.3g], cost "
                "spread %.3g, heuristic %s, seed %llu",
                setup.base.name.c_str(), setup.base.p, setup.base.m, setup.base.v, deck.policy.iterations,
                deck.policy.episodes, deck.policy.noise_levels[0], deck.policy.noise_levels[1], deck.policy.cost_spread,
                deck.policy.heuristic.c_str(), deck.policy.seed);
  log::info(line);

  std::ofstream curve(out / "curve.csv");
  if (!curve) throw Error("cannot write '" + (out / "curve.csv").string() + "'");
  curve << "iteration,decisions,sampled_makespan_ms,greedy_makespan_ms,heuristic_makespan_ms,policy_loss,"
           "value_loss,entropy,seconds\n";
  Progress progress("train-policy", "iterations", deck.policy.iterations);  // on stderr, at most once a second
  const auto result = policy::train_ppo(setup, [&](const policy::IterationStats& s) {
    progress.update(s.iteration + 1);
    std::snprintf(line, sizeof line,
                  "iter %4d/%d  decisions %6d  makespan sampled %.4f greedy %.4f heuristic %.4f ms (greedy %+.2f%%)  "
                  "loss pi %+.4f v %.5f  entropy %.3f  %.1f s",
                  s.iteration + 1, deck.policy.iterations, s.decisions, s.sampled_makespan, s.greedy_makespan,
                  s.heuristic_makespan, 100.0 * (s.greedy_makespan / s.heuristic_makespan - 1.0), s.policy_loss,
                  s.value_loss, s.entropy, s.seconds);
    log::info(line);
    curve << s.iteration << ',' << s.decisions;
    for (double v : {s.sampled_makespan, s.greedy_makespan, s.heuristic_makespan, s.policy_loss, s.value_loss,
                     s.entropy, s.seconds})
      curve << ',' << format_double(v);
    curve << '\n' << std::flush;
  });
  const std::string policy_path = (out / "policy.pt").string();
  policy::save_policy(result.policy, policy_path);
  log::info("wrote " + policy_path + " and " + (out / "curve.csv").string());

  const auto rows = policy::compare_methods(config::resolve(deck), result.policy, deck.policy.eval_steps);
  const std::string table = policy::format_table(rows);
  write_text_file(out / "summary.csv", policy::to_csv(rows));
  write_text_file(out / "summary.txt", table);
  log::info("summary (" + std::to_string(deck.policy.eval_steps) + " simulated steps, the deck's noise):\n" + table);
  return 0;
}

}  // namespace conductor::plugin
