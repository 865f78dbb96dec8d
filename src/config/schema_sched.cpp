// Deck keys of the scheduling layers: schedule, cost, noise, scheduler.
#include "conductor/config/schema.hpp"

namespace conductor::config {

void add_sched_fields(std::vector<Field>& f) {
  f.push_back(field<std::string>("schedule.kind", [](Deck& d) -> auto& { return d.schedule.kind; },
                                 "Pipeline schedule generator, or `file:PATH` for a schedule in the text form.")
                  .one_of({"gpipe", "1f1b", "1f1b-interleaved", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v"})
                  .or_prefix("file:"));
  f.push_back(field<std::string>("schedule.execution", [](Deck& d) -> auto& { return d.schedule.execution; },
                                 "`strict`: each rank runs its list in order; `readiness`: each rank runs the best "
                                 "ready op under the hint policy.")
                  .one_of({"strict", "readiness"}));
  f.push_back(field<std::string>("schedule.hint", [](Deck& d) -> auto& { return d.schedule.hint; },
                                 "Readiness ranking: `schedule` (the list's order), `bf` (backward before forward), "
                                 "`bfw` (B, then F, W fills idle time).")
                  .one_of({"schedule", "bf", "bfw"}));
  f.push_back(field<double>("schedule.memory_limit", [](Deck& d) -> auto& { return d.schedule.memory_limit; },
                            "In-flight activation limit per rank in units of one microbatch's activations (M_F); "
                            "0 = the schedule kind's default (p for 1F1B-like and zb-1p, 2p for zb-2p).")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>("cost.forward", [](Deck& d) -> auto& { return d.cost.forward; },
                                         "Forward (F) time per microbatch in ms: one value, or one per stage.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>("cost.backward_input",
                                         [](Deck& d) -> auto& { return d.cost.backward_input; },
                                         "Backward-for-input (B) time per microbatch in ms: one value or one per stage.")
                  .range(0, 1e9));
  f.push_back(field<std::vector<double>>("cost.backward_weight",
                                         [](Deck& d) -> auto& { return d.cost.backward_weight; },
                                         "Backward-for-weights (W) time per microbatch in ms: one value or one per "
                                         "stage.")
                  .range(0, 1e9));
  f.push_back(field<double>("cost.comm", [](Deck& d) -> auto& { return d.cost.comm; },
                            "Time in ms of one point-to-point transfer, added to every cross-stage dependency.")
                  .range(0, 1e9));
  f.push_back(field<double>("cost.memory_after_b", [](Deck& d) -> auto& { return d.cost.memory_after_b; },
                            "Fraction of M_F still held between B and W; negative = from the model "
                            "(32h / (34h + 5as)).")
                  .range(-1, 1));
  f.push_back(field<std::vector<std::string>>("noise.kind", [](Deck& d) -> auto& { return d.noise.kind; },
                                              "Noise models, one or a list: none, gaussian, lognormal, straggler, "
                                              "congestion.")
                  .one_of({"none", "gaussian", "lognormal", "straggler", "congestion"}));
  f.push_back(field<double>("noise.level", [](Deck& d) -> auto& { return d.noise.level; },
                            "Relative noise level (0.10 = 10% per-op jitter).")
                  .range(0, 100));
  f.push_back(field<unsigned long long>("noise.seed", [](Deck& d) -> auto& { return d.noise.seed; },
                                        "Seed of the noise streams."));
  f.push_back(field<std::string>("scheduler.kind", [](Deck& d) -> auto& { return d.scheduler.kind; },
                                 "Global tier: `static` keeps the generator's order.")
                  .one_of({"static"}));
}

void finalize_sched(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  const int p = deck.parallel.pipeline;
  const std::string& src = options.source_name;
  auto check_per_stage = [&](const std::vector<double>& v, const char* key) {
    if (v.size() != 1 && static_cast<int>(v.size()) != p) {
      problems.push_back(src + ": " + key + " has " + std::to_string(v.size()) +
                         " values; give one value, or one per stage (parallel.pipeline = " + std::to_string(p) + ")");
    }
  };
  check_per_stage(deck.cost.forward, "cost.forward");
  check_per_stage(deck.cost.backward_input, "cost.backward_input");
  check_per_stage(deck.cost.backward_weight, "cost.backward_weight");
}

}  // namespace conductor::config
