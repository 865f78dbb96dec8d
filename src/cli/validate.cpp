#include <cstdio>
#include <string>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/data.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::cli {

namespace {

std::string escape_cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

// The schema as a Markdown table; docs/deck.md embeds this output (a test checks it lists every key). The
// defaults are the code's, before any derivation: a key whose default means "derived" (schedule.memory_limit 0,
// cost.memory_after_b -1) shows that value, and its meaning says what it derives from.
void print_keys() {
  const config::Deck defaults{};
  std::string section = "\x01";
  for (const auto& f : config::schema()) {
    const auto dot = f.path.find('.');
    const std::string this_section = dot == std::string::npos ? "" : f.path.substr(0, dot);
    if (this_section != section) {
      section = this_section;
      std::printf("\n### %s\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n",
                  section.empty() ? "top level" : ("`" + section + "`").c_str());
    }
    YAML::Emitter e;
    e << YAML::Flow << f.get(defaults);
    std::string allowed;
    for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + ("`" + c + "`");
    for (const auto& p : f.prefixes) allowed += (allowed.empty() ? "" : ", ") + ("`" + p + "...`");
    if (f.min || f.max) {
      // Shortest round-trip text, as resolved decks print numbers (to_string would show 1e-7 as 0.000000).
      const auto num = [](double v) { return format_double(v); };
      allowed = (f.min ? num(*f.min) : std::string("-inf")) + " .. " + (f.max ? num(*f.max) : std::string("inf"));
    }
    std::printf("| `%s` | %s | `%s` | %s | %s |\n", f.path.c_str(), f.type_name.c_str(), e.c_str(),
                escape_cell(allowed).c_str(), escape_cell(f.doc).c_str());
  }
}

// The deck's schedule, built as every command builds it: a list that cannot be made (a memory limit below what
// it holds, a schedule file that does not fit the deck, a search that finds nothing) is a problem of the deck,
// found here rather than by the command it was meant for; and its data files' headers; for a run, its ranks'
// memory against the deck's own limit. Prints the message; false then.
bool deck_builds(const config::Deck& deck, config::Command command) {
  try {
    const plan::Plan plan = config::resolve(deck);
    const sched::Schedule schedule = sched::make_schedule(plan);
    // The data files' headers too (not their tokens: a shard of gigabytes would take seconds per rank), so a
    // shard that is not one fails here, before a job with it waits in a queue.
    // Only where the command reads them: a run on a math backend (the emulated backend and the simulator read no
    // data, so one override switches a deck).
    if (command == config::Command::Run && plan.backend != "emulated") model::check_data_headers(plan);
    // What a run opens before its first step: the checkpoint it resumes (a root with a `latest`, or a step
    // folder) and the global tier's policy, made into the planner a run would make (its file, and whether it
    // fits this deck's pipeline). Whether the checkpoint leaves steps to run is the run's check, not a deck
    // problem: the job scripts validate a requeued job's deck first, then tell a finished run (exit 0) from it.
    if (!deck.checkpoint.resume.empty()) {
      // Its files as the loader checks them, but for their bytes (reading every weight is the run's; so are the
      // data files it recorded).
      const std::string step_dir = model::resolve_checkpoint(deck.checkpoint.resume);
      if (plan.backend != "emulated") model::check_checkpoint_fits(plan, schedule.num_stages(), step_dir);
    }
    if (const sched::PlannerFactory make_planner = planner_factory(plan)) (void)make_planner(schedule);
    if (command == config::Command::Run) check_rank_sizes_against_deck_limit(deck);
    return true;
  } catch (const InputError& e) {
    std::fprintf(stderr, "conductor: %s\n", e.what());
    return false;
  }
}

}  // namespace

namespace {

// The command a --as or --output-for value names (Validate: none of them, after the message).
config::Command command_named(const std::string& flag, const std::string& what) {
  if (what == "run") return config::Command::Run;
  if (what == "simulate") return config::Command::Simulate;
  if (what == "train-policy") return config::Command::TrainPolicy;
  std::fprintf(stderr, "conductor validate: %s '%s': expected run, simulate or train-policy\n", flag.c_str(),
               printable(what).c_str());
  return config::Command::Validate;
}

}  // namespace

int cmd_validate(const Invocation& inv) {
  if (inv.has_flag("--keys")) {
    print_keys();
    return 0;
  }
  // The rules of the command named (plain validate: conductor run's, as the README says): simulate's default
  // run.output ends in -sim; run's own rules apply (one helper, no replicas, more than one slice); run without its
  // rank count, since this one process is not the run's ranks. --output-for also checks run.output as that command
  // would before writing anything.
  const bool output = inv.has_flag("--output-for");
  if (output && inv.has_flag("--as")) {
    std::fprintf(stderr, "conductor validate: --as and --output-for both name the command; give one\n");
    return kExitUsage;
  }
  config::Command command = config::Command::Run;
  if (output || inv.has_flag("--as")) {
    const std::string flag = output ? "--output-for" : "--as";
    command = command_named(flag, inv.flags.at(flag));
    if (command == config::Command::Validate) return kExitUsage;
  }
  const config::Deck deck = load_deck(inv, command, command == config::Command::Run ? 0 : -1);
  if (output) {
    try {
      check_run_output(deck, command);
      if (command == config::Command::Run && !deck.checkpoint.path.empty())
        probe_writable("checkpoint.path", deck.checkpoint.path);
    } catch (const InputError& e) {
      std::fprintf(stderr, "conductor: %s\n", e.what());
      return kExitUsage;
    }
  }
  if (!output && command == config::Command::Run) {
    try {
      check_resume(deck);  // with --output-for, check_run_output made it
    } catch (const InputError& e) {
      std::fprintf(stderr, "conductor: %s\n", e.what());
      return kExitUsage;
    }
  }
  if (!deck_builds(deck, command)) return kExitUsage;
  std::fputs(config::to_yaml(deck).c_str(), stdout);
  return 0;
}

}  // namespace conductor::cli
