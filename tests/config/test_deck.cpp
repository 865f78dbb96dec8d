// Deck loading: strictness, locations, suggestions, overrides, round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;
using namespace conductor::config;

namespace {

std::vector<std::string> problems_of(const std::string& text, std::vector<std::string> overrides = {},
                                     Command command = Command::Validate, int world = 1) {
  LoadOptions o;
  o.source_name = "deck.yaml";
  o.overrides = std::move(overrides);
  o.command = command;
  o.world_size = world;
  try {
    parse_deck(text, o);
  } catch (const DeckError& e) {
    return e.problems();
  }
  return {};
}

Deck parse(const std::string& text, std::vector<std::string> overrides = {}) {
  LoadOptions o;
  o.source_name = "deck.yaml";
  o.overrides = std::move(overrides);
  return parse_deck(text, o);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Deck, EmptyDeckGivesDefaults) {
  Deck d = parse("");
  EXPECT_EQ(d.parallel.pipeline, Deck{}.parallel.pipeline);
  EXPECT_EQ(d.run.output, "runs/" + d.run.name);  // derived default
}

TEST(Deck, ResolvedYamlRoundTrips) {
  Deck d = parse("run: {name: rt, steps: 7}\nparallel: {pipeline: 2}\n", {"cost.forward=[1.5, 2.25]"});
  const std::string once = to_yaml(d);
  const std::string twice = to_yaml(parse(once));
  EXPECT_EQ(once, twice);
  EXPECT_TRUE(contains(once, "steps: 7"));
  EXPECT_TRUE(contains(once, "forward: [1.5, 2.25]"));
}

TEST(Deck, ResolvedYamlListsEveryKey) {
  const std::string yaml = to_yaml(parse(""));
  for (const auto& f : schema()) {
    const std::string leaf = f.path.substr(f.path.rfind('.') + 1);
    EXPECT_TRUE(contains(yaml, leaf + ":")) << f.path;
  }
}

TEST(Deck, UnknownSectionHasLocationAndSuggestion) {
  auto p = problems_of("run:\n  steps: 2\nschedul:\n  kind: 1f1b\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:3:1")) << p[0];
  EXPECT_TRUE(contains(p[0], "unknown key 'schedul'")) << p[0];
  EXPECT_TRUE(contains(p[0], "did you mean 'schedule'")) << p[0];
  // A section given a value on the command line is named as a section with its keys (was "unknown key 'run'").
  p = problems_of("", {"run=3"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0],
                       "command line 'run=3': 'run' is a section; set one of its keys (log_every, "
                       "memory_limit_gb, name, output, overwrite, seed, steps), e.g. run.log_every=..."))
      << p[0];
}

TEST(Deck, UnknownNestedKeySuggestsSibling) {
  auto p = problems_of("parallel:\n  pipelin: 3\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:2:3")) << p[0];
  EXPECT_TRUE(contains(p[0], "did you mean 'parallel.pipeline'")) << p[0];
}

TEST(Deck, KeyInWrongSectionSuggestsFullPath) {
  auto p = problems_of("pipeline: 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "did you mean 'parallel.pipeline'")) << p[0];
}

TEST(Deck, AllProblemsReportedTogether) {
  auto p = problems_of("schedul: {}\nparallel: {pipeline: -1, microbatches: x}\nrun: {stepz: 1}\n");
  EXPECT_EQ(p.size(), 4u);
}

TEST(Deck, TypeErrorNamesKeyAndValue) {
  auto p = problems_of("parallel:\n  pipeline: abc\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:2:13")) << p[0];
  EXPECT_TRUE(contains(p[0], "parallel.pipeline")) << p[0];
  EXPECT_TRUE(contains(p[0], "'abc'")) << p[0];
  // Numbers: decimal only (hexadecimal was read as a double but refused as an integer); a value no double holds is
  // said to be one, not "not a number".
  p = problems_of("", {"cost.comm=0x10"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "cost.comm") && contains(p[0], "expected a decimal number, got '0x10'")) << p[0];
  for (const std::string tiny : {"1e-320", "1e-400", "1e400"}) {
    p = problems_of("", {"cost.comm=" + tiny});
    ASSERT_EQ(p.size(), 1u) << (p.size() > 1 ? p[0] + " / " + p[1] : std::string());
    EXPECT_TRUE(contains(p[0], "'" + tiny + "' is beyond what a double holds")) << p[0];
  }
  // Booleans: YAML 1.2's true, True, TRUE (TRUE was refused) and 1.1's yes/on; anything else names the spellings.
  for (const std::string yes : {"true", "True", "TRUE", "yes", "on", "FALSE", "off"})
    EXPECT_TRUE(problems_of("", {"trace.enabled=" + yes}).empty()) << yes;
  p = problems_of("", {"trace.enabled=1"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "expected true or false (also True, TRUE, yes, on; False, FALSE, no, off), got '1'"))
      << p[0];
}

TEST(Deck, RangeErrorNamesAllowedRange) {
  auto p = problems_of("parallel: {pipeline: 0}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "parallel.pipeline")) << p[0];
  EXPECT_TRUE(contains(p[0], "out of range (allowed: 1 .. 65536)")) << p[0];
  // A log-normal sigma stays within 3, as noise.level's does (10 spread a training's costs over e^20).
  p = problems_of("", {"ppo.cost_spread=10"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "ppo.cost_spread") && contains(p[0], "out of range (allowed: 0 .. 3)")) << p[0];
  EXPECT_TRUE(problems_of("", {"ppo.cost_spread=3"}).empty());
  p = problems_of("", {"ppo.noise_levels=[10, 0.25]"});  // numbers as the deck writes them (was 10.000000)
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "ppo.noise_levels must be two values [lo, hi] with lo <= hi (got [10, 0.25])")) << p[0];
}

TEST(Deck, ChoiceErrorListsAllowedAndSuggests) {
  auto p = problems_of("schedule: {kind: zb-2q}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "allowed: gpipe")) << p[0];
  EXPECT_TRUE(contains(p[0], "did you mean 'zb-2p'")) << p[0];
}

TEST(Deck, CudaTransportChoicesAndNcclNeedsCuda) {
  auto bad = problems_of("cuda: {transport: gloo}\n");
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_TRUE(contains(bad[0], "cuda.transport")) << bad[0];
  EXPECT_TRUE(contains(bad[0], "allowed: auto, nccl, mpi")) << bad[0];
  auto nccl_on_cpu = problems_of("backend: cpu\ncuda: {transport: nccl}\n");
  ASSERT_EQ(nccl_on_cpu.size(), 1u);
  EXPECT_TRUE(contains(nccl_on_cpu[0], "cuda.transport = 'nccl' needs backend: cuda")) << nccl_on_cpu[0];
  EXPECT_EQ(parse("").cuda.transport, "auto");
  EXPECT_TRUE(problems_of("backend: emulated\ncuda: {transport: mpi}\n").empty());
}

TEST(Deck, OverrideTypeErrorNamesKey) {
  auto p = problems_of("", {"parallel.pipeline=abc"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "command line 'parallel.pipeline=abc'")) << p[0];
  EXPECT_TRUE(contains(p[0], "parallel.pipeline: expected an integer, got 'abc'")) << p[0];
}

// A value that does not read as the key's type says what is allowed, as an out-of-range one does: an integer past
// 64 bits read "does not fit in an integer" alone.
TEST(Deck, UnreadableValueNamesTheRange) {
  auto p = problems_of("", {"run.steps=99999999999999999999", "parallel.microbatches=1e30", "run.name=3"});
  ASSERT_EQ(p.size(), 2u);
  const std::string all = p[0] + "\n" + p[1];  // in the schema's order
  EXPECT_TRUE(contains(all, "run.steps: '99999999999999999999' does not fit in an integer (allowed: 1 .. ")) << all;
  EXPECT_TRUE(contains(all, "parallel.microbatches: expected an integer, got '1e30' (allowed: 1 .. ")) << all;
}

// A check across keys names where each key it is about came from: the override of its first key ("key: ..."
// included), or the deck and the overrides of the other keys it names.
TEST(Deck, CrossKeyProblemNamesTheOverridesOfItsKeys) {
  auto p = problems_of("schedule: {kind: zb-h1}\n", {"parallel.virtual=2"}, Command::Simulate);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("deck.yaml, command line 'parallel.virtual=2': schedule.kind = zb-h1", 0), 0u) << p[0];
  p = problems_of("model: {n_layers: 2}\nparallel: {pipeline: 4}\ncost: {device_tflops: 150}\n",
                  {"model.layers_per_stage=balanced"}, Command::Simulate);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("command line 'model.layers_per_stage=balanced': model.layers_per_stage: balanced", 0), 0u)
      << p[0];
  // All from the deck: the deck alone.
  p = problems_of("schedule: {kind: zb-h1}\nparallel: {virtual: 2}\n", {}, Command::Simulate);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("deck.yaml: schedule.kind = zb-h1", 0), 0u) << p[0];
}

// A straggler window opening after the last step would slow nothing: refused where run.steps counts the steps.
TEST(Deck, StragglerWindowMustOpenWithinTheRun) {
  const std::vector<std::string> late = {"noise.kind=[gaussian,straggler]", "run.steps=20", "noise.straggler_start=20"};
  for (Command c : {Command::Validate, Command::Simulate, Command::Run}) {
    const auto p = problems_of("", late, c, 4);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(
        contains(p[0], "noise.straggler_start = 20 is past the run's last step (run.steps = 20: steps 0 .. 19)"))
        << p[0];
    EXPECT_TRUE(contains(p[0], "command line 'noise.straggler_start=20'")) << p[0];
  }
  EXPECT_TRUE(problems_of("", late, Command::TrainPolicy).empty());  // its episodes are not run.steps long
  EXPECT_TRUE(problems_of("", {"noise.kind=[gaussian,straggler]", "run.steps=20", "noise.straggler_start=19"}).empty());
  EXPECT_TRUE(problems_of("", {"noise.kind=gaussian", "run.steps=20", "noise.straggler_start=20"}).empty());
}

TEST(Deck, UnknownOverridePathRejected) {
  auto p = problems_of("", {"parallel.pipelines=4"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "unknown key 'parallel.pipelines'")) << p[0];
  EXPECT_TRUE(contains(p[0], "did you mean 'parallel.pipeline'")) << p[0];
  EXPECT_EQ(problems_of("", {"nonsense=1"}).size(), 1u);
  EXPECT_EQ(problems_of("", {"no-equals-sign"}).size(), 1u);
}

TEST(Deck, OverridesReplaceDeckValuesInOrder) {
  Deck d = parse("parallel: {pipeline: 2, microbatches: 4}\n",
                 {"parallel.pipeline=8", "parallel.pipeline=16",
                  "cost.forward=[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]", "model.n_layers=16"});
  EXPECT_EQ(d.parallel.pipeline, 16);
  EXPECT_EQ(d.parallel.microbatches, 4);
  EXPECT_EQ(d.cost.forward.size(), 16u);
}

TEST(Deck, OverrideCreatesMissingSection) {
  Deck d = parse("run: {steps: 3}\n", {"schedule.kind=zb-h1"});
  EXPECT_EQ(d.schedule.kind, "zb-h1");
}

TEST(Deck, ScalarAcceptedWhereListIs) {
  Deck d = parse("cost: {forward: 2.5}\n");
  ASSERT_EQ(d.cost.forward.size(), 1u);
  EXPECT_DOUBLE_EQ(d.cost.forward[0], 2.5);
}

TEST(Deck, SectionMustBeMapping) {
  auto p = problems_of("parallel: 4\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "'parallel' is a section")) << p[0];
}

TEST(Deck, YamlSyntaxErrorHasLine) {
  auto p = problems_of("run:\n  steps: [1, 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(std::regex_search(p[0], std::regex("deck\\.yaml:[0-9]+:[0-9]+: YAML syntax error"))) << p[0];
}

// A tab in the indentation is named (yaml-cpp says only "illegal map value"); a syntax error without one is not
// given the hint.
TEST(Deck, YamlSyntaxErrorNamesATabIndent) {
  auto p = problems_of("run:\n\tsteps: 3\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:2:") && contains(p[0], "line 2 is indented with a tab")) << p[0];
  p = problems_of("run:\n  steps: [1, 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_FALSE(contains(p[0], "tab")) << p[0];
}

// Bytes that are not UTF-8 in a deck file are refused as on the command line (they went into resolved.yaml and
// the trace, whose readers then refused conductor's own files).
TEST(Deck, FileTextMustBeUtf8) {
  auto p = problems_of("run:\n  output: nu_\xFF\xFE\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:2: holds bytes that are not UTF-8 text (byte 18 of the file)")) << p[0];
  EXPECT_TRUE(problems_of("run:\n  output: caf\xC3\xA9\n").empty());  // UTF-8 itself is text
}

TEST(Deck, RunNeedsOneRankPerStage) {
  auto p = problems_of("parallel: {pipeline: 4}\n", {}, Command::Run, 2);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "parallel.pipeline = 4")) << p[0];
  EXPECT_TRUE(contains(p[0], "2 MPI ranks")) << p[0];
  EXPECT_TRUE(problems_of("parallel: {pipeline: 2}\n", {}, Command::Run, 2).empty());
  EXPECT_TRUE(problems_of("parallel: {pipeline: 4}\n", {}, Command::Simulate, 1).empty());
}

TEST(Deck, DuplicateKeyIsAnError) {
  auto p = problems_of("run: {steps: 1}\nrun: {steps: 2}\n");
  EXPECT_FALSE(p.empty());
}

// docs/deck.md documents every key of the schema.
TEST(DeckDocs, EveryKeyIsDocumented) {
  const char* src = CONDUCTOR_TEST_SOURCE_DIR;
  std::ifstream in(std::string(src) + "/docs/deck.md");
  ASSERT_TRUE(in) << "docs/deck.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& f : schema()) {
    EXPECT_TRUE(contains(doc, "`" + f.path + "`")) << "docs/deck.md does not document `" << f.path << "`";
  }
}

// The layer split is checked wherever a model would be built (cpu and cuda, run and validate), so a deck that
// `validate` accepts does not fail when `run` builds the stages; simulate and emulated never split layers.
TEST(Deck, LayerSplitIsCheckedForEveryMathBackend) {
  auto names_split = [](const std::vector<std::string>& problems) {
    for (const auto& p : problems) {
      if (p.find("model.n_layers = 4 is fewer than the 8 virtual stages") != std::string::npos) return true;
    }
    return false;
  };
  for (const std::string backend : {"cpu", "cuda"}) {
    const std::string text = "backend: " + backend + "\nparallel: {pipeline: 8}\nmodel: {n_layers: 4}\n";
    EXPECT_TRUE(names_split(problems_of(text))) << backend << ": validate";
    EXPECT_TRUE(names_split(problems_of(text, {}, Command::Run, 8))) << backend << ": run";
    EXPECT_FALSE(names_split(problems_of(text, {}, Command::Simulate))) << backend << ": simulate";
  }
  EXPECT_TRUE(problems_of("backend: emulated\nparallel: {pipeline: 8}\nmodel: {n_layers: 4}\n").empty());
}

// A repeated key is located in the deck (file:line:col of the second one), even when an override sets it.
TEST(Deck, DuplicateKeyIsLocatedInTheDeckNotOnTheCommandLine) {
  auto p = problems_of("run:\n  steps: 3\n  steps: 4\n", {"run.steps=5"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:3:3: key 'run.steps' appears twice (first at line 2)")) << p[0];
  EXPECT_FALSE(contains(p[0], "command line")) << p[0];
}

// A decay that ends before the warm-up does (not 0, which follows run.steps) left the rate at its peak for ever.
TEST(Deck, DecayEndingInTheWarmupIsRefused) {
  auto p = problems_of("optim: {warmup_steps: 10, decay_steps: 5}\n");
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "optim.decay_steps = 5 is not after optim.warmup_steps = 10")) << p[0];
  EXPECT_TRUE(problems_of("optim: {warmup_steps: 10, decay_steps: 0}\nrun: {steps: 5}\n").empty());
  EXPECT_TRUE(problems_of("optim: {warmup_steps: 10, decay_steps: 11}\n").empty());
  // Where no model trains the optimizer's keys are not read.
  EXPECT_TRUE(problems_of("optim: {warmup_steps: 10, decay_steps: 5}\n", {}, Command::Simulate).empty());
}

// A value is quoted as written unless it would garble the terminal or fill the screen (escaped and cut, as the
// command line's text is); an unsigned key's quoted " -1" wrapped to 18446744073709551615.
TEST(Deck, ValuesInMessagesArePrintableAndSeedsAreNeverNegative) {
  auto p = problems_of("run:\n  seed: \" -1\"\n");
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "run.seed: expected a non-negative integer, got ' -1'")) << p[0];
  p = problems_of("schedule:\n  kind: zb\x1b[2J\n");  // (bytes that are not UTF-8: FileTextMustBeUtf8)
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "value 'zb\\x1B[2J' is not allowed")) << p[0];
  p = problems_of("run:\n  steps: " + std::string(100000, '7') + "x\n");
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_LT(p[0].size(), 400u);
}

// A key written with a dot (`run.steps: 3`) was read as run's steps, and then the same key from the section form,
// a fragment or an override was dropped without a word: it is refused where it is written, whatever comes later.
TEST(Deck, DottedKeyIsRefusedWhereItIsWritten) {
  auto p = problems_of("run.steps: 3\n", {"run.steps=7"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0],
                       "deck.yaml:1:1: key 'run.steps' holds a '.'; a deck nests its keys by section ('run:' "
                       "with the rest indented below it)"))
      << p[0];
  // A dotted name that is no key's path is an unknown key, with its suggestion.
  p = problems_of("optim:\n  adam.beta1: 0.8\nrun:\n  steps: 4\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "deck.yaml:2:3: unknown key 'optim.adam.beta1'")) << p[0];
}

// An override changes exactly one key, also when the deck aliases its value elsewhere (an anchor and an alias
// share one YAML node).
TEST(Deck, OverrideDoesNotWriteThroughAliases) {
  const std::string text = "run:\n  steps: &n 5\n  seed: *n\nparallel: &par {pipeline: 2}\n";
  Deck d = parse(text, {"run.steps=7"});
  EXPECT_EQ(d.run.steps, 7);
  EXPECT_EQ(d.run.seed, 5u);
  Deck e = parse("run:\n  seed: &n 5\n  steps: *n\n", {"run.seed=9"});
  EXPECT_EQ(e.run.seed, 9u);
  EXPECT_EQ(e.run.steps, 5);
  Deck f = parse(text);  // without overrides the alias still resolves
  EXPECT_EQ(f.run.seed, 5u);
}

// A deck file with no keys is an error (it would run every default); parse_deck("") stays the defaults.
TEST(Deck, EmptyDeckFileIsAnError) {
  LoadOptions o;
  o.source_name = "empty.yaml";
  o.from_file = true;
  for (const std::string text : {"", "\n\n", "# only a comment\n"}) {
    try {
      parse_deck(text, o);
      ADD_FAILURE() << "accepted an empty deck: '" << text << "'";
    } catch (const DeckError& e) {
      ASSERT_EQ(e.problems().size(), 1u);
      EXPECT_TRUE(contains(e.problems()[0], "empty.yaml: the deck is empty")) << e.problems()[0];
    }
  }
  EXPECT_NO_THROW(parse_deck("run: {}\n", o));
}

// `run.output=` (and `output:` in a deck) means the default folder, as documented.
TEST(Deck, EmptyOutputMeansTheDefault) {
  EXPECT_EQ(parse("run: {name: q, output: elsewhere}\n", {"run.output="}).run.output, "runs/q");
  EXPECT_EQ(parse("run: {name: q, output:}\n").run.output, "runs/q");
}

// simulate writes to its own folder by default, so it never replaces a measured run's results.
TEST(Deck, SimulateDefaultsToItsOwnFolder) {
  LoadOptions o;
  o.command = Command::Simulate;
  EXPECT_EQ(parse_deck("run: {name: q}\n", o).run.output, "runs/q-sim");
  EXPECT_EQ(parse_deck("run: {name: q, output: mine}\n", o).run.output, "mine");
  o.command = Command::TrainPolicy;  // its own too: after `make run`, train-policy into runs/q was refused
  EXPECT_EQ(parse_deck("run: {name: q}\n", o).run.output, "runs/q-policy");
  EXPECT_EQ(parse_deck("run: {name: q, output: mine}\n", o).run.output, "mine");
  o.command = Command::Run;
  o.world_size = 4;
  EXPECT_EQ(parse_deck("run: {name: q}\n", o).run.output, "runs/q");
}

// data.path without data.source: file would be ignored (training on synthetic bytes): an error naming both.
TEST(Deck, DataPathNeedsFileSource) {
  auto p = problems_of("data: {path: /etc/hostname}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "data.path = '/etc/hostname' is set but data.source = 'synthetic'")) << p[0];
  EXPECT_TRUE(problems_of("data: {source: file, path: " CONDUCTOR_TEST_SOURCE_DIR "/README.md}\n").empty());
}

TEST(Deck, OverwriteAndMemoryLimitKeys) {
  Deck d = parse("run: {overwrite: true, memory_limit_gb: 2.5}\n");
  EXPECT_TRUE(d.run.overwrite);
  EXPECT_DOUBLE_EQ(d.run.memory_limit_gb, 2.5);
  EXPECT_FALSE(Deck{}.run.overwrite);
  EXPECT_FALSE(problems_of("run: {memory_limit_gb: -1}\n").empty());
}

// --- Deck fragments (conductor COMMAND DECK [FRAGMENT.yaml ...] [key.path=value ...])

namespace {

LoadOptions composed(std::vector<DeckText> fragments, std::vector<std::string> overrides = {}) {
  LoadOptions o;
  o.source_name = "deck.yaml";
  o.from_file = true;
  o.fragments = std::move(fragments);
  o.overrides = std::move(overrides);
  return o;
}

std::vector<std::string> composition_problems(const std::string& deck, std::vector<DeckText> fragments,
                                              std::vector<std::string> overrides = {}) {
  try {
    parse_deck(deck, composed(std::move(fragments), std::move(overrides)));
  } catch (const DeckError& e) {
    return e.problems();
  }
  return {};
}

const std::string kNoisyDeck = "run: {steps: 3, seed: 1}\nnoise: {kind: [gaussian], level: 0.1, seed: 7}\n";

}  // namespace

// Fragments merge in order, mappings key by key: a later fragment wins a key, keys it does not name stay.
TEST(DeckFragments, LaterFragmentWinsKeyByKey) {
  const Deck d = parse_deck(kNoisyDeck, composed({{"a.yaml", "noise: {level: 0.2}\nrun: {steps: 5}\n"},
                                                  {"b.yaml", "noise:\n  level: 0.3\n"}}));
  EXPECT_DOUBLE_EQ(d.noise.level, 0.3);
  EXPECT_EQ(d.run.steps, 5);
  EXPECT_EQ(d.noise.seed, 7u);  // the deck's, untouched by either fragment
  EXPECT_EQ(d.run.seed, 1u);
  const Deck swapped = parse_deck(kNoisyDeck, composed({{"b.yaml", "noise:\n  level: 0.3\n"},
                                                        {"a.yaml", "noise: {level: 0.2}\nrun: {steps: 5}\n"}}));
  EXPECT_DOUBLE_EQ(swapped.noise.level, 0.2);
}

TEST(DeckFragments, OverrideWinsOverFragments) {
  const Deck d = parse_deck(kNoisyDeck, composed({{"a.yaml", "run: {steps: 5}\n"}}, {"run.steps=9"}));
  EXPECT_EQ(d.run.steps, 9);
}

// A list is a value: a fragment's list replaces the deck's whole (block lists and anchors are fine here).
TEST(DeckFragments, ListsAreReplacedWhole) {
  const Deck d =
      parse_deck("noise: {kind: [gaussian, straggler], level: 0.1}\n",
                 composed({{"f.yaml", "noise:\n  kind:\n    - congestion\n  seed: &s 4\nrun: {seed: *s}\n"}}));
  EXPECT_EQ(d.noise.kind, (std::vector<std::string>{"congestion"}));
  EXPECT_EQ(d.run.seed, 4u);
  EXPECT_DOUBLE_EQ(d.noise.level, 0.1);
}

// An empty section in a fragment changes nothing; a fragment's section the deck lacks is added whole.
TEST(DeckFragments, EmptySectionKeepsTheDeckAndNewSectionsAreAdded) {
  const Deck d = parse_deck(kNoisyDeck, composed({{"f.yaml", "noise:\nschedule: {kind: zb-h1}\n"}}));
  EXPECT_DOUBLE_EQ(d.noise.level, 0.1);
  EXPECT_EQ(d.schedule.kind, "zb-h1");
}

// Each problem names the file, line and column its value came from: the fragment, the deck or the command line.
TEST(DeckFragments, ProblemsAreLocatedInTheirSource) {
  auto p = composition_problems(
      "run: {steps: 2}\nparallel: {pipeline: x}\n",
      {{"f.yaml", "noise:\n  level: 0.1\n  levl: 2\nrun:\n  steps: abc\ncuda:\n  tf33: on\n"}}, {"noise.seed=-3"});
  ASSERT_EQ(p.size(), 5u) << ::testing::PrintToString(p);
  const std::string all = ::testing::PrintToString(p);
  EXPECT_TRUE(contains(all, "f.yaml:3:3: unknown key 'noise.levl'")) << all;
  EXPECT_TRUE(contains(all, "f.yaml:5:10: run.steps: expected an integer, got 'abc'")) << all;
  EXPECT_TRUE(contains(all, "f.yaml:7:3: unknown key 'cuda.tf33'")) << all;  // a section the deck did not have
  EXPECT_TRUE(contains(all, "deck.yaml:2:22: parallel.pipeline: expected an integer, got 'x'")) << all;
  EXPECT_TRUE(contains(all, "command line 'noise.seed=-3': noise.seed: expected a non-negative integer")) << all;
}

// A value replaced by a later fragment is blamed on that fragment, not on one whose keys it replaced.
TEST(DeckFragments, ReplacedSectionIsBlamedOnTheLastFragment) {
  auto p = composition_problems(
      kNoisyDeck,
      {{"a.yaml", "noise: {level: 0.2}\n"}, {"b.yaml", "noise: 5\n"}, {"c.yaml", "noise:\n  level: bad\n"}});
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "c.yaml:2:10: noise.level: expected a number, got 'bad'")) << p[0];
  p = composition_problems(kNoisyDeck, {{"a.yaml", "noise: 5\n"}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "a.yaml:1:8: 'noise' is a section")) << p[0];
}

// A fragment is checked like the deck: repeated keys located in it, empty or non-mapping text refused.
TEST(DeckFragments, FragmentIsCheckedLikeTheDeck) {
  auto p = composition_problems(kNoisyDeck, {{"dup.yaml", "run:\n  steps: 1\n  steps: 2\n"}}, {"run.steps=4"});
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "dup.yaml:3:3: key 'run.steps' appears twice (first at line 2)")) << p[0];
  p = composition_problems(kNoisyDeck, {{"dot.yaml", "run.steps: 5\n"}});
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_TRUE(contains(p[0], "dot.yaml:1:1: key 'run.steps' holds a '.'")) << p[0];
  for (const std::string text : {"", "# only a comment\n"}) {
    p = composition_problems(kNoisyDeck, {{"empty.yaml", text}});
    ASSERT_EQ(p.size(), 1u) << (p.size() > 1 ? p[0] + " / " + p[1] : std::string());
    EXPECT_TRUE(contains(p[0], "empty.yaml: the fragment is empty (no keys)")) << p[0];
  }
  p = composition_problems(kNoisyDeck, {{"list.yaml", "- noise\n"}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(contains(p[0], "list.yaml: a fragment is a mapping of sections")) << p[0];
  p = composition_problems(kNoisyDeck, {{"bad.yaml", "noise: {level: [1, 2\n"}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(std::regex_search(p[0], std::regex("bad\\.yaml:[0-9]+:[0-9]+: YAML syntax error"))) << p[0];
}

// An override changes one key of a section a fragment brought, also through the fragment's aliases.
TEST(DeckFragments, OverrideDoesNotWriteThroughFragmentAliases) {
  const Deck d = parse_deck(kNoisyDeck, composed({{"f.yaml", "run:\n  steps: &n 5\n  seed: *n\n"}}, {"run.steps=7"}));
  EXPECT_EQ(d.run.steps, 7);
  EXPECT_EQ(d.run.seed, 5u);
}

// resolved.yaml records the sources in order in a comment header; the text after it is the deck itself.
TEST(DeckFragments, ResolvedYamlNamesTheSources) {
  const Deck d = parse_deck(kNoisyDeck, composed({{"a.yaml", "run: {steps: 5}\n"}}, {"run.name=x"}));
  const std::string resolved = resolved_yaml(d);
  EXPECT_EQ(resolved.rfind("# conductor resolved deck", 0), 0u) << resolved;
  EXPECT_TRUE(contains(resolved, "#   deck deck.yaml\n#   fragment a.yaml\n#   override run.name=x\n")) << resolved;
  EXPECT_EQ(without_header(resolved), to_yaml(d));
  EXPECT_EQ(to_yaml(parse_deck(resolved, {})), to_yaml(d));
  EXPECT_EQ(resolved_yaml(Deck{}), to_yaml(Deck{}));  // a deck built in code has no sources to name
}

// Each section's keys are contiguous in the schema, so docs/deck.md and resolved decks show a section once.
TEST(DeckDocs, SectionsAreContiguous) {
  std::set<std::string> seen;
  std::string current = "\x01";
  for (const auto& f : schema()) {
    const auto dot = f.path.find('.');
    const std::string section = dot == std::string::npos ? "" : f.path.substr(0, dot);
    if (section == current) continue;
    EXPECT_TRUE(seen.insert(section).second)
        << "section '" << section << "' is split in the schema (at " << f.path << ")";
    current = section;
  }
}

// migration.*: bad values name the key, the value and what is allowed.
TEST(Deck, MigrationBadValuesHaveClearMessages) {
  auto one = [](std::vector<std::string> overrides, Command command = Command::Validate) {
    const auto p = problems_of("", std::move(overrides), command, 4);
    return p.size() == 1 ? p[0] : std::string("(") + std::to_string(p.size()) + " problems)";
  };
  std::string p = one({"migration.enabled=true", "migration.link=custom"});
  EXPECT_TRUE(contains(p, "migration.link = custom needs migration.bandwidth_gbps > 0")) << p;
  EXPECT_TRUE(contains(p, "nvlink, infiniband")) << p;
  p = one({"migration.enabled=true", "migration.slices=3"});  // 4 heads
  EXPECT_TRUE(contains(p, "migration.slices = 3 does not divide model.n_heads = 4")) << p;
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.slices=3", "migration.units=[mlp,vocab]"}).empty());
  p = one({"migration.enabled=true", "migration.max_fraction=0"});
  EXPECT_TRUE(contains(p, "migration.max_fraction = 0 moves nothing")) << p;
  // A fraction whose floor of the slices is 0 moved nothing too, silently (0.01 x 4 slices; 0.5 x 1 slice).
  p = one({"migration.enabled=true", "migration.max_fraction=0.01"});
  EXPECT_TRUE(contains(p,
                       "migration.max_fraction = 0.01 of migration.slices = 4 lets a helper take no slice (at "
                       "most floor(0.01 x 4) = 0); give a fraction of at least 1/4"))
      << p;
  p = one({"migration.enabled=true", "migration.slices=1"});
  EXPECT_TRUE(contains(p, "of migration.slices = 1 lets a helper take no slice")) << p;
  // One slice per op: the simulator moves it whole; conductor run never splits a unit of one group (it moved none).
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.slices=1", "migration.max_fraction=1"}).empty());
  p = one({"migration.enabled=true", "migration.slices=1", "migration.max_fraction=1"}, Command::Run);
  EXPECT_TRUE(contains(p, "migration.slices = 1 makes each op one slice, which conductor run does not move")) << p;
  p = one({"migration.max_fraction=1.5"});
  EXPECT_TRUE(contains(p, "migration.max_fraction")) << p;
  p = one({"migration.link=ethernet"});
  EXPECT_TRUE(contains(p, "nvlink")) << p;
  p = one({"migration.units=[heads,rows]"});
  EXPECT_TRUE(contains(p, "migration.units")) << p;
  // conductor run migrates on the emulated backend, and on cpu and cuda the MLP groups, the head groups and the
  // LM-head vocabulary groups.
  EXPECT_TRUE(problems_of("", {"migration.enabled=true"}, Command::Run, 4).empty());  // units: heads, mlp, vocab
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.units=[mlp]"}, Command::Run, 4).empty());
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.units=[heads]"}, Command::Run, 4).empty());
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.units=[mlp,heads]"}, Command::Run, 4).empty());
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.units=[vocab]"}, Command::Run, 4).empty());
  // A vocabulary group holds at least one LM-head row, in every command (as an MLP group holds a column): the
  // simulator's cost model splits the same columns.
  for (const Command command : {Command::Run, Command::Simulate, Command::TrainPolicy}) {
    p = one({"migration.enabled=true", "migration.units=[vocab]", "model.vocab=8", "migration.slices=16"}, command);
    EXPECT_TRUE(contains(p, "migration.slices = 16 exceeds model.vocab = 8 (unit 'vocab')")) << p;
  }
  EXPECT_TRUE(
      problems_of("", {"migration.enabled=true", "migration.units=[vocab]", "model.vocab=8", "migration.slices=8"})
          .empty());
  // Each unit once: a repeated one counted its work twice as movable (the simulator moved more than the model has).
  for (const std::string units : {"[heads,heads]", "[mlp,vocab,mlp]"}) {
    p = one({"migration.enabled=true", "migration.units=" + units});
    EXPECT_TRUE(contains(p, "migration.units lists " + std::string(units == "[heads,heads]" ? "heads" : "mlp") +
                                " twice; name each unit once"))
        << p;
  }
  // A forced help with migration off was ignored without a word: refused in every command, naming the fix.
  for (const Command command : {Command::Run, Command::Simulate, Command::Validate}) {
    p = one({"migration.force=[\"1->0:W:2\"]"}, command);
    EXPECT_TRUE(contains(p,
                         "migration.force (1 entry) forces helps, but migration.enabled = false: set "
                         "migration.enabled=true, or remove migration.force"))
        << p;
  }
  EXPECT_TRUE(problems_of("", {"migration.force=[]"}).empty());  // resolved.yaml's default
  p = one({"migration.enabled=true", "migration.units=[mlp]", "migration.weights=replicas"}, Command::Run);
  EXPECT_TRUE(contains(p, "migration.weights = replicas: conductor run sends weight slices on demand only")) << p;
  p = one({"migration.weights=copies"});
  EXPECT_TRUE(contains(p, "on_demand")) << p;
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.units=[mlp]", "migration.force=[\"1->0:F,B,W:1\"]"},
                          Command::Run, 4)
                  .empty());
  // migration.force: the form, ranks, one entry per owner, slices.
  for (const auto& [entry, says] :
       std::vector<std::pair<std::string, std::string>>{{"1-0:W:1", "expected OWNER->HELPER:KINDS:SLICES"},
                                                        {"1->0:X:1", "op kind 'X' is not one of F, B, W, BW"},
                                                        {"1->1:W:1", "two different ranks in 0..3"},
                                                        {"1->4:W:1", "two different ranks in 0..3"},
                                                        {"1->0:W:5", "slices must be in 1..4"}}) {
    p = one({"migration.enabled=true", "migration.force=[\"" + entry + "\"]"});
    EXPECT_TRUE(contains(p, "migration.force entry '" + entry + "'") && contains(p, says)) << p;
  }
  // Unquoted, several kinds split the entry at their commas: the message says to quote it.
  const auto split = problems_of("", {"migration.enabled=true", "migration.force=[1->0:W,BW:2]"}, Command::Validate, 4);
  ASSERT_EQ(split.size(), 2u);  // the entries '1->0:W' and 'BW:2'
  EXPECT_TRUE(contains(split[0], "migration.force entry '1->0:W'") &&
              contains(split[0], "quote the entry inside the list"))
      << split[0];
  p = one({"migration.enabled=true", "migration.force=[\"1->0:BW:1\", \"1->2:BW:1\"]"});
  EXPECT_TRUE(contains(p, "already an owner")) << p;
  // An entry that can move nothing: B and W on a schedule whose backward is one BW op (the default 1f1b).
  p = one({"migration.enabled=true", "migration.force=[\"1->0:B,W:1\"]"});
  EXPECT_TRUE(contains(p, "schedule.kind = 1f1b runs each backward as one BW op")) << p;
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "schedule.kind=zb-h1", "migration.force=[\"1->0:B,W:1\"]"},
                          Command::Run, 4)
                  .empty());
  // ... and BW alone on a zero-bubble list, whose backward is always B and W (dualpipev keeps some BW: allowed).
  p = one({"migration.enabled=true", "schedule.kind=zb-h1", "migration.force=[\"1->0:BW:2\"]"});
  EXPECT_TRUE(contains(p, "schedule.kind = zb-h1 splits every backward into B and W (no BW op)")) << p;
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "schedule.kind=zb-h1", "migration.force=[\"1->0:F,BW:1\"]"},
                          Command::Run, 4)
                  .empty());
  // A kind named twice is a typo, not a stronger request.
  p = one({"migration.enabled=true", "migration.force=[\"1->0:W,W:1\"]"});
  EXPECT_TRUE(contains(p, "op kind 'W' is listed twice")) << p;
  // conductor run on cuda moves every unit, as on cpu: the default units and a named vocab raise no migration
  // problem. A build without CUDA (the sanitizer builds) adds its own problem for backend=cuda: none of ours among
  // them.
  for (const auto& units : {std::string("migration.enabled=true"), std::string("migration.units=[mlp, heads]"),
                            std::string("migration.units=[heads, vocab]")}) {
    for (const std::string& q : problems_of("", {"migration.enabled=true", "backend=cuda", units}, Command::Run, 4)) {
      EXPECT_FALSE(contains(q, "migration")) << q;
    }
  }
#ifdef CONDUCTOR_HAVE_CUDA
  LoadOptions run;
  run.command = Command::Run;
  run.world_size = 4;  // the default parallel.pipeline
  run.overrides = {"migration.enabled=true", "backend=cuda"};
  EXPECT_EQ(parse_deck("", run).migration.units, (std::vector<std::string>{"heads", "mlp", "vocab"}));
#endif
  for (const std::string& q : problems_of("", {"migration.enabled=true", "backend=emulated"}, Command::Run)) {
    EXPECT_FALSE(contains(q, "migration")) << q;
  }
  EXPECT_TRUE(problems_of("", {"migration.link=custom"}).empty());  // off: no link needed
  // Several helpers per op: simulated, not run (the runtime sends an op's slices to one helper).
  p = one({"migration.enabled=true", "backend=emulated", "migration.helpers=3"}, Command::Run);
  EXPECT_TRUE(contains(p, "migration.helpers = 3: conductor run sends an op's slices to one helper only")) << p;
  EXPECT_TRUE(problems_of("", {"migration.enabled=true", "migration.helpers=3"}).empty());
  // A forced pattern: conductor run's alone (the simulator ignored it silently); validate and run accept it.
  const std::vector<std::string> forced = {"migration.enabled=true", "backend=emulated", "migration.units=[mlp]",
                                           "migration.force=[\"1->0:F,BW:2\"]"};
  for (const Command command : {Command::Simulate, Command::TrainPolicy}) {
    p = one(forced, command);
    EXPECT_TRUE(contains(p,
                         "migration.force (1 entry) forces helps in conductor run only; the simulator decides "
                         "every help itself"))
        << p;
  }
  for (const auto& q : problems_of("", forced)) ADD_FAILURE() << q;
  for (const auto& q : problems_of("", forced, Command::Run, 4)) ADD_FAILURE() << q;
  p = one({"migration.helpers=0"});
  EXPECT_TRUE(contains(p, "migration.helpers")) << p;
}

// The link presets resolve to stated numbers; a custom link keeps the deck's; disabled stays off.
TEST(Deck, MigrationResolvesLinkAndSliceCosts) {
  plan::Plan off = resolve(parse(""));
  EXPECT_FALSE(off.migration.enabled);
  EXPECT_TRUE(off.migration.ops.empty());
  plan::Plan ib = resolve(parse("", {"migration.enabled=true"}));
  EXPECT_TRUE(ib.migration.enabled);
  EXPECT_DOUBLE_EQ(ib.migration.bandwidth_gbps, 25);
  EXPECT_DOUBLE_EQ(ib.migration.latency_ms, 0.01);
  plan::Plan nv = resolve(parse("", {"migration.enabled=true", "migration.link=nvlink"}));
  EXPECT_DOUBLE_EQ(nv.migration.bandwidth_gbps, 300);
  plan::Plan custom = resolve(parse(
      "", {"migration.enabled=true", "migration.link=custom", "migration.bandwidth_gbps=7", "migration.latency_us=0"}));
  EXPECT_DOUBLE_EQ(custom.migration.bandwidth_gbps, 7);
  EXPECT_DOUBLE_EQ(custom.migration.latency_ms, 0);
  // Defaults: p = 4, d_model 64, 4 heads, vocab 256, 4 layers (one per rank), microbatch 4 x 64 tokens, fp32.
  ASSERT_EQ(ib.migration.ops.size(), 4u);
  EXPECT_EQ(ib.migration.slices, 4);  // 0: one slice per head
  const double t = 4 * 64, h = 64, s = 64, V = 256, G = 4, e = 4;
  // Rank 0, F, all units: every FLOP of a layer is in a head or MLP slice; the bytes of the heads and the MLP:
  // 2 x (th out + th back) + per slice (4h^2 + (4th + 4t)) / G + (8h^2 + 4th) / G, in fp32.
  const plan::SliceCosts& f0 = ib.migration.ops[0][0];
  EXPECT_DOUBLE_EQ(f0.sliced_fraction, 1.0);
  EXPECT_DOUBLE_EQ(f0.helper_factor, 1.0);
  EXPECT_DOUBLE_EQ(f0.bytes_fixed, 4 * t * h * e);
  EXPECT_DOUBLE_EQ(f0.bytes_per_slice, ((4 * h * h + 4 * t * h + 4 * t) + (8 * h * h + 4 * t * h)) / G * e);
  EXPECT_EQ(f0.messages, 4);
  // The last rank's B: the LM head's vocabulary slices are recomputed on a helper (factor between 1 and 2); only
  // the hidden state, two per-token statistics and the input-gradient partial cross for it, never logits.
  const plan::SliceCosts& b3 = ib.migration.ops[3][1];
  const double layer_b = 24 * t * h * h + 8 * t * s * h, head = 2 * t * h * V;
  EXPECT_DOUBLE_EQ(b3.sliced_fraction, 1.0);
  EXPECT_NEAR(b3.helper_factor, (layer_b + 2 * head) / (layer_b + head), 1e-12);
  EXPECT_DOUBLE_EQ(b3.bytes_fixed, (4 * t * h + 2 * t * h + 2 * t) * e);
  // Heads only: the MLP's FLOPs stay with the owner.
  plan::Plan heads = resolve(parse("", {"migration.enabled=true", "migration.units=[heads]"}));
  EXPECT_NEAR(heads.migration.ops[0][2].sliced_fraction, 8.0 / 24.0, 1e-12);
}

// cost.encoder_tflop: three values; refused where the command builds a model without an encoder; stage 0's
// encoder joins the fixed part of its ops (the sliced fraction is the layers' FLOPs over the layers' and the
// encoder's), and no other rank changes.
TEST(Deck, EncoderTflopIsCheckedAndNeverSliced) {
  const auto two = problems_of("", {"backend=emulated", "cost.encoder_tflop=[1, 2]"});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_TRUE(contains(two[0], "command line 'cost.encoder_tflop=[1, 2]': cost.encoder_tflop has 2 values; give three"))
      << two[0];
  const auto cpu = problems_of("", {"backend=cpu", "cost.encoder_tflop=[1, 1, 1]"});
  ASSERT_EQ(cpu.size(), 1u);
  EXPECT_TRUE(contains(cpu[0], "cost.encoder_tflop describes an encoder the cpu model does not have")) << cpu[0];
  EXPECT_TRUE(problems_of("", {"backend=emulated", "cost.encoder_tflop=[1, 1, 1]"}).empty());
  EXPECT_TRUE(problems_of("", {"backend=cpu", "cost.encoder_tflop=[1, 1, 1]"}, Command::Simulate).empty());
  // Defaults: one layer per rank, t = 256 tokens, h = s = 64. The encoder's F equals a layer's F, its W twice a
  // layer's W: rank 0's F keeps half its FLOPs sliceable, W a third, B between.
  const double t = 256, h = 64, s = 64, f = 24 * t * h * h + 4 * t * s * h, w = 24 * t * h * h;
  char enc[128];
  std::snprintf(enc, sizeof enc, "cost.encoder_tflop=[%.17g, 1e-5, %.17g]", f / 1e12, 2 * w / 1e12);
  const plan::Plan plain = resolve(parse("", {"backend=emulated", "migration.enabled=true"}));
  const plan::Plan with = resolve(parse("", {"backend=emulated", "migration.enabled=true", std::string(enc)}));
  EXPECT_NEAR(with.migration.ops[0][0].sliced_fraction, 0.5, 1e-12);
  EXPECT_NEAR(with.migration.ops[0][2].sliced_fraction, 1.0 / 3.0, 1e-12);
  const double b = 24 * t * h * h + 8 * t * s * h;
  EXPECT_NEAR(with.migration.ops[0][1].sliced_fraction, b / (b + 1e7), 1e-12);
  EXPECT_DOUBLE_EQ(with.migration.ops[0][0].bytes_per_slice, plain.migration.ops[0][0].bytes_per_slice);
  for (std::size_t r = 1; r < 4; ++r) {
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_EQ(with.migration.ops[r][k].sliced_fraction, plain.migration.ops[r][k].sliced_fraction) << r << k;
  }
}

// migration.weights=replicas: a replica holds every slice of a rank's sliced weights (F's weight slices: QKV and
// projection 4h^2/G and MLP 2rh^2/G per layer); W moves no weights of a layer (its per-slice bytes are gradients).
TEST(Deck, MigrationReplicasResolveTheirBytes) {
  const plan::Plan on_demand = resolve(parse("", {"migration.enabled=true"}));
  EXPECT_FALSE(on_demand.migration.replicas);
  const plan::Plan p =
      resolve(parse("", {"migration.enabled=true", "migration.weights=replicas", "migration.replica_peers=2"}));
  EXPECT_TRUE(p.migration.replicas);
  EXPECT_EQ(p.migration.replica_peers, 2);
  const double h = 64, G = 4, e = 4;  // defaults: one layer per rank, fp32
  EXPECT_DOUBLE_EQ(p.migration.ops[0][0].weight_bytes_per_slice, (4 * h * h + 8 * h * h) / G * e);
  EXPECT_DOUBLE_EQ(p.migration.ops[0][2].weight_bytes_per_slice, 0.0);
  EXPECT_DOUBLE_EQ(p.migration.replica_bytes[0], 12 * h * h * e);
  EXPECT_DOUBLE_EQ(p.migration.replica_bytes[3], (12 * h * h + 256 * h) * e);  // the LM head's columns too
}

// The slices' FLOPs are the cost model's (plan/flops.hpp): the MLP's share follows model.mlp_ratio (W per layer:
// attention projections 8th^2, MLP 4 r th^2).
TEST(Deck, MigrationSliceFlopsFollowMlpRatio) {
  for (const int r : {1, 2, 4}) {
    const std::string ratio = "model.mlp_ratio=" + std::to_string(r);
    plan::Plan mlp = resolve(parse("", {"migration.enabled=true", "migration.units=[mlp]", ratio}));
    plan::Plan heads = resolve(parse("", {"migration.enabled=true", "migration.units=[heads]", ratio}));
    EXPECT_NEAR(mlp.migration.ops[0][2].sliced_fraction, 4.0 * r / (8 + 4.0 * r), 1e-12) << ratio;
    EXPECT_NEAR(heads.migration.ops[0][2].sliced_fraction, 8.0 / (8 + 4.0 * r), 1e-12) << ratio;
  }
}

// The emulated backend has no weights: checkpoint.path wrote nothing and said nothing.
TEST(Deck, EmulatedBackendRefusesCheckpoints) {
  for (const std::string key : {"checkpoint.path=ck", "checkpoint.resume=ck"}) {
    const auto p = problems_of("", {"backend=emulated", key});
    ASSERT_EQ(p.size(), 1u) << key;
    EXPECT_TRUE(contains(p[0], "with backend = emulated, which has no weights to checkpoint")) << p[0];
  }
  EXPECT_TRUE(problems_of("", {"backend=cpu", "checkpoint.path=ck"}).empty());
}
