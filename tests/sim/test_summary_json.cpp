// summary.json (sim/summary_json.hpp): every field with its type and exact value, parsed back with nlohmann's
// strict parser; the run summary is the simulator's plus the training fields; non-finite values stay valid
// JSON; docs/trace.md lists every key.
#include "conductor/config/resolve.hpp"
#include "conductor/sim/summary_json.hpp"

#include <gtest/gtest.h>
#include <cmath>

#include <algorithm>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"

using namespace conductor;
using nlohmann::json;

namespace {

struct Simulated {
  config::Deck deck;
  sched::Schedule schedule;
  sim::SimOptions options;
  sim::RunResult run;
};

// 1F1B on 4 ranks with lognormal noise, so the figures are not round numbers (the old "%.10g" text lost digits).
Simulated simulate_deck() {
  config::LoadOptions load;
  load.command = config::Command::Simulate;
  Simulated s;
  s.deck = config::parse_deck(
      "run: {steps: 3}\nparallel: {pipeline: 4, microbatches: 8}\nschedule: {kind: 1f1b}\n"
      "noise: {kind: lognormal, level: 0.2, seed: 3}\n",
      load);
  s.schedule = sched::make_schedule(config::resolve(s.deck));
  s.options = sim::SimOptions::from_plan(config::resolve(s.deck), s.schedule);
  s.run = sim::simulate_run(s.schedule, sim::NoiseModel::from_plan(config::resolve(s.deck), s.schedule), s.options,
                            s.deck.run.steps);
  return s;
}

// What a reader gets: the text written, through the strict parser (it rejects NaN, Infinity and bad UTF-8).
json written(const sim::Json& summary) { return json::parse(sim::dump_json(summary)); }

void expect_numbers(const json& list, const std::vector<double>& values, const std::string& key) {
  ASSERT_TRUE(list.is_array()) << key;
  ASSERT_EQ(list.size(), values.size()) << key;
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_TRUE(list[i].is_number_float()) << key << "[" << i << "]";
    EXPECT_EQ(list[i].get<double>(), values[i]) << key << "[" << i << "]";  // exact: round-trip text
  }
}

std::vector<std::string> keys_of(const std::string& text) {
  std::vector<std::string> keys;
  const sim::Json parsed = sim::Json::parse(text);  // named: items() refers to it, a temporary would dangle
  for (const auto& item : parsed.items()) keys.push_back(item.key());
  return keys;
}

}  // namespace

TEST(SummaryJson, SimulatorSummaryHasEveryFieldWithItsTypeAndExactValue) {
  const Simulated s = simulate_deck();
  const sim::RunResult& run = s.run;
  const sim::Json summary = sim::summary_json(run, config::resolve(s.deck), s.schedule, s.options.memory_limit);
  EXPECT_EQ(keys_of(sim::dump_json(summary)),
            (std::vector<std::string>{
                "makespan_ms",  "bubble_ratio", "stage_bubble_ratio", "lower_bound_ms", "makespan_over_lower_bound",
                "throughput",   "schedule",     "execution",          "hint",           "pipeline",
                "microbatches", "virtual",      "memory_limit",       "noise",          "num_steps",
                "busy_ms",      "idle_ms",      "peak_memory",        "steps",          "run"}));
  const json j = written(summary);
  expect_numbers(
      json::array({j["makespan_ms"], j["bubble_ratio"], j["stage_bubble_ratio"], j["lower_bound_ms"], j["throughput"]}),
      {run.mean_makespan_ms, run.mean_bubble_ratio, run.mean_stage_bubble_ratio, run.mean_lower_bound_ms,
       run.mean_throughput},
      "means");
  EXPECT_EQ(j["makespan_over_lower_bound"].get<double>(), run.mean_makespan_ms / run.mean_lower_bound_ms);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["execution"], s.deck.schedule.execution);
  EXPECT_EQ(j["hint"], s.deck.schedule.hint);
  for (const char* key : {"pipeline", "microbatches", "virtual", "num_steps"})
    EXPECT_TRUE(j[key].is_number_integer()) << key;
  EXPECT_EQ(j["pipeline"], 4);
  EXPECT_EQ(j["microbatches"], 8);
  EXPECT_EQ(j["virtual"], 1);
  EXPECT_EQ(j["num_steps"], 3);
  EXPECT_TRUE(j["memory_limit"].is_number());
  EXPECT_EQ(j["memory_limit"].get<double>(), s.options.memory_limit);
  EXPECT_EQ(j["noise"], json({{"kind", {"lognormal"}}, {"level", 0.2}, {"seed", 3}}));
  expect_numbers(j["busy_ms"], run.mean_busy_ms, "busy_ms");
  expect_numbers(j["idle_ms"], run.mean_idle_ms, "idle_ms");
  expect_numbers(j["peak_memory"], run.peak_memory, "peak_memory");
  ASSERT_EQ(j["steps"].size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    const json& step = j["steps"][k];
    const sim::StepResult& r = run.steps[k];
    EXPECT_EQ(step["step"], static_cast<int>(k));
    expect_numbers(json::array({step["makespan_ms"], step["bubble_ratio"], step["stage_bubble_ratio"],
                                step["lower_bound_ms"], step["throughput"]}),
                   {r.makespan_ms, r.bubble_ratio, r.stage_bubble_ratio, r.lower_bound_ms, r.throughput},
                   "step " + std::to_string(k));
  }
}

// With SimOptions::order_bound (conductor simulate) the run's and each step's order bound are written, exactly;
// without it (the runtime's summary) neither key is.
TEST(SummaryJson, OrderBoundOnlyWhereTheSimulatorComputedIt) {
  Simulated s = simulate_deck();
  const json without = written(sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  EXPECT_FALSE(without.contains("order_bound_ms"));
  EXPECT_FALSE(without["steps"][0].contains("order_bound_ms"));
  s.options.order_bound = true;
  const sim::RunResult run =
      sim::simulate_run(s.schedule, sim::NoiseModel::from_plan(config::resolve(s.deck), s.schedule), s.options, 3);
  ASSERT_GT(run.mean_order_bound_ms, 0.0);
  const json j = written(sim::summary_json(run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  EXPECT_EQ(j["order_bound_ms"].get<double>(), run.mean_order_bound_ms);
  EXPECT_EQ(j["makespan_over_order_bound"].get<double>(), run.mean_makespan_ms / run.mean_order_bound_ms);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(j["steps"][k]["order_bound_ms"].get<double>(), run.steps[k].order_bound_ms);
    EXPECT_LE(run.steps[k].order_bound_ms, run.steps[k].makespan_ms);
  }
}

// A run at its order bound reads 1, not the ulp below it that its two means' rounding gives.
TEST(SummaryJson, MakespanAtItsOrderBoundReadsOne) {
  Simulated s = simulate_deck();
  s.options.order_bound = true;
  sim::RunResult run =
      sim::simulate_run(s.schedule, sim::NoiseModel::from_plan(config::resolve(s.deck), s.schedule), s.options, 1);
  run.mean_order_bound_ms = std::nextafter(run.mean_makespan_ms, 2 * run.mean_makespan_ms);
  json j = written(sim::summary_json(run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  EXPECT_EQ(j["makespan_over_order_bound"].get<double>(), 1.0);
  run.mean_order_bound_ms = run.mean_makespan_ms * 1.01;  // a bound above the makespan is shown, not hidden
  j = written(sim::summary_json(run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  EXPECT_LT(j["makespan_over_order_bound"].get<double>(), 0.995);
}

TEST(SummaryJson, RunFiguresAreTheRunResults) {
  const Simulated s = simulate_deck();
  const json j = written(sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  const json& run = j["run"];
  EXPECT_EQ(run["overlapping_steps"], false);
  expect_numbers(json::array({run["span_ms"], run["throughput"], run["bubble_ratio"], run["steady_throughput"],
                              run["steady_bubble_ratio"], run["max_stage_bubble_ratio"]}),
                 {s.run.span_ms, s.run.run_throughput, s.run.run_bubble_ratio, s.run.steady_throughput,
                  s.run.steady_bubble_ratio, s.run.mean_max_stage_bubble_ratio},
                 "run");
  // Synchronous steps back to back: the run's span is the sum of the makespans.
  double sum = 0.0;
  for (const auto& step : s.run.steps) sum += step.makespan_ms;
  EXPECT_NEAR(s.run.span_ms, sum, 1e-9 * sum);
}

TEST(SummaryJson, RunSummaryIsTheSimulatorsPlusTrainingFields) {
  const Simulated s = simulate_deck();
  const json simulated = written(sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit));
  const sim::TrainingFigures training{2, {5.5, 5.125}, 1, {0.25}, {{1, 5.25}}};
  const sim::Json summary =
      sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit, training);
  std::vector<std::string> keys = keys_of(sim::dump_json(summary));
  const std::vector<std::string> added(keys.begin() + static_cast<std::ptrdiff_t>(simulated.size()), keys.end());
  EXPECT_EQ(added, (std::vector<std::string>{"scheduler", "backend", "first_step", "losses", "final_loss",
                                             "valid_losses", "final_valid_loss"}));
  const json j = written(summary);
  for (const auto& item : simulated.items()) EXPECT_EQ(j[item.key()], item.value()) << item.key();
  EXPECT_EQ(j["scheduler"], json({{"kind", "static"}, {"orders_from_policy", 1}, {"latency_ms", {0.25}}}));
  EXPECT_EQ(j["backend"], s.deck.backend);
  EXPECT_TRUE(j["first_step"].is_number_integer());
  EXPECT_EQ(j["first_step"], 2);
  expect_numbers(j["losses"], training.losses, "losses");
  EXPECT_EQ(j["final_loss"].get<double>(), 5.125);
  EXPECT_EQ(j["valid_losses"], json::parse(R"([{"step": 2, "loss": 5.25}])"));  // step counted from 1
  EXPECT_EQ(j["final_valid_loss"].get<double>(), 5.25);
}

TEST(SummaryJson, NonFiniteLossesAreNullAndTheFileStaysValid) {
  const Simulated s = simulate_deck();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  sim::TrainingFigures training{0, {4.0, inf, nan}, 0, {}};
  const std::string text =
      sim::dump_json(sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit, training));
  EXPECT_EQ(text.find("NaN"), std::string::npos);
  EXPECT_EQ(text.find("nan"), std::string::npos);
  const json j = json::parse(text);  // throws on anything that is not JSON
  EXPECT_EQ(j["losses"], json::parse("[4.0, null, null]"));
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["scheduler"]["latency_ms"].is_array());

  training.losses.clear();  // stopped before the first step completed
  EXPECT_TRUE(written(sim::summary_json(s.run, config::resolve(s.deck), s.schedule, s.options.memory_limit,
                                        training))["final_loss"]
                  .is_null());
}

TEST(SummaryJson, BytesThatAreNotUtf8DoNotBreakTheFile) {
  const json j = json::parse(sim::dump_json(sim::Json{{"name", std::string("run-\xff")}}));
  EXPECT_EQ(j["name"], "run-\xef\xbf\xbd");  // U+FFFD
}

// `policy`: the policy file a ppo run's planner loaded, as it names it (deck_crc32 null when the file has none); no
// key for another kind, nor without a policy file (a policy given in memory).
TEST(SummaryJson, PolicyOfAPpoRunOnly) {
  const Simulated s = simulate_deck();
  plan::Plan plan = config::resolve(s.deck);
  const sched::PolicySource policy{"/runs/tp/policy.pt", 16870, "0x03661a6f", "0xfeda9285"};
  EXPECT_FALSE(written(sim::summary_json(s.run, plan, s.schedule, s.options.memory_limit, &policy)).contains("policy"));
  plan.scheduler.kind = "ppo";
  EXPECT_FALSE(written(sim::summary_json(s.run, plan, s.schedule, s.options.memory_limit)).contains("policy"));
  const std::string text = sim::dump_json(sim::summary_json(s.run, plan, s.schedule, s.options.memory_limit, &policy));
  EXPECT_EQ(json::parse(text)["policy"], json::parse(R"({"path": "/runs/tp/policy.pt", "bytes": 16870,
                                         "crc32": "0x03661a6f", "deck_crc32": "0xfeda9285"})"));
  const std::vector<std::string> order = keys_of(text);
  EXPECT_EQ(*(std::find(order.begin(), order.end(), "noise") + 1), "policy");  // docs/trace.md's order
  sim::TrainingFigures training;
  const sched::PolicySource older{"/shipped.pt", 10, "0x0000000a", ""};
  training.policy = &older;
  EXPECT_TRUE(
      written(sim::summary_json(s.run, plan, s.schedule, s.options.memory_limit, training))["policy"]["deck_crc32"]
          .is_null());
}

// docs/trace.md documents summary.json: its tables list exactly the keys written.
TEST(SummaryJson, DocsListEveryKey) {
  std::ifstream doc(std::string(CONDUCTOR_TEST_SOURCE_DIR) + "/docs/trace.md");
  ASSERT_TRUE(doc) << "docs/trace.md";
  std::stringstream text;
  text << doc.rdbuf();
  const std::string all = text.str();
  const std::size_t begin = all.find("## `summary.json`");
  ASSERT_NE(begin, std::string::npos) << "docs/trace.md has no summary.json section";
  const std::string section = all.substr(begin, all.find("\n## ", begin + 1) - begin);
  std::set<std::string> documented;
  const std::regex row(R"(\n\| `([a-z_]+)` \|)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row); it != std::sregex_iterator(); ++it)
    documented.insert((*it)[1]);

  Simulated s = simulate_deck();
  s.options.order_bound = true;  // with conductor simulate's order bound
  s.run = sim::simulate_run(s.schedule, sim::NoiseModel::from_plan(config::resolve(s.deck), s.schedule), s.options, 3);
  s.run.stopped_by_signal = 15;              // with the key of a run a signal stopped
  plan::Plan ppo = config::resolve(s.deck);  // with the keys of scheduler.kind ppo (policy)
  ppo.scheduler.kind = "ppo";
  const sched::PolicySource policy{"/p/policy.pt", 1, "0x00000001", ""};
  sim::TrainingFigures training;
  training.policy = &policy;
  const sim::Json summary = sim::summary_json(s.run, ppo, s.schedule, s.options.memory_limit, training);
  std::set<std::string> written_keys;
  for (const auto& item : summary.items()) written_keys.insert(item.key());
  EXPECT_EQ(documented, written_keys);
}
