// Deck keys of computation migration (migration.*; docs/migration.md) and their cross-field checks.
#include <algorithm>
#include <cmath>

#include "conductor/config/resolve.hpp"
#include "conductor/config/schema.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config {

void add_migration_fields(std::vector<Field>& f) {
  f.push_back(field<bool>(
      "migration.enabled", [](Deck & d) -> auto& { return d.migration.enabled; },
      "Computation migration (`conductor simulate`; `conductor run` on backend emulated, and on cpu and cuda the MLP "
      "column groups, attention head groups and LM-head vocabulary groups of migration.units): when an op starts, its "
      "owner may give up "
      "to migration.max_fraction of its equal slices to an idle peer that will be done before its own next "
      "input arrives; the op ends when both parts are in. Every byte pays the link (docs/migration.md)."));
  f.push_back(
      field<std::vector<std::string>>(
          "migration.units", [](Deck & d) -> auto& { return d.migration.units; },
          "What may move: `heads` (attention head groups of every layer), `mlp` (MLP column groups), "
          "`vocab` (LM-head vocabulary column groups, vocabulary-parallel loss: only the hidden state "
          "goes out, never logits), each named once. The rest of an op (norms, residuals, loss) stays with its owner.")
          .one_of({"heads", "mlp", "vocab"}));
  f.push_back(field<int>(
                  "migration.slices", [](Deck & d) -> auto& { return d.migration.slices; },
                  "Equal slices per op: slice i holds n_heads/slices heads and mlp_ratio*d_model/slices MLP "
                  "columns of every layer, and vocab/slices LM-head columns; must divide model.n_heads when "
                  "`heads` moves, and leave every MLP and vocabulary group a column. 0 = model.n_heads (one head "
                  "per slice).")
                  .range(0, 4096));
  f.push_back(field<double>(
                  "migration.max_fraction", [](Deck & d) -> auto& { return d.migration.max_fraction; },
                  "Most of an op's slices one helper takes (0.5: up to half).")
                  .range(0, 1));
  f.push_back(field<int>(
                  "migration.helpers", [](Deck & d) -> auto& { return d.migration.helpers; },
                  "Most peers one op's slices go to at once (each takes up to migration.max_fraction of them); "
                  "more than 1 in `conductor simulate` only. A rank has parallel.pipeline - 1 peers: a larger value "
                  "lets every peer help, as parallel.pipeline - 1 does.")
                  .range(1, 1024));
  f.push_back(field<std::string>(
                  "migration.link", [](Deck & d) -> auto& { return d.migration.link; },
                  "Link between owner and helper: `nvlink` (300 GB/s, 5 us per message), `infiniband` (HDR "
                  "200 Gb/s: 25 GB/s, 10 us), or `custom` (migration.bandwidth_gbps and migration.latency_us "
                  "given).")
                  .one_of({"nvlink", "infiniband", "custom"}));
  f.push_back(field<double>(
                  "migration.bandwidth_gbps", [](Deck & d) -> auto& { return d.migration.bandwidth_gbps; },
                  "Link bandwidth in GB/s per direction; 0 = the preset's (custom: required, > 0).")
                  .range(0, 1e9));
  f.push_back(field<double>(
                  "migration.latency_us", [](Deck & d) -> auto& { return d.migration.latency_us; },
                  "Latency per message in microseconds; negative = the preset's (custom: required, >= 0).")
                  .range(-1, 1e9));
  f.push_back(field<int>(
                  "migration.element_bytes", [](Deck & d) -> auto& { return d.migration.element_bytes; },
                  "Bytes per element of the tensors a migration moves; 0 = model.precision's (fp32: 4, bf16: 2). "
                  "2 models a bf16 run of a deck simulated with the emulated backend (which is fp32).")
                  .range(0, 8));
  f.push_back(field<std::string>(
                  "migration.weights", [](Deck & d) -> auto& { return d.migration.weights; },
                  "Where a helper's weight slices come from: `on_demand` (sent with every help) or `replicas` "
                  "(each rank's sliced weights kept on migration.replica_peers peers, the nearest in the ring "
                  "whose memory budget has room after their own schedule's peak; counted in their memory and "
                  "refreshed over the link after every optimizer step; a help by a holder moves no weights). "
                  "`conductor simulate` only.")
                  .one_of({"on_demand", "replicas"}));
  f.push_back(field<int>(
                  "migration.replica_peers", [](Deck & d) -> auto& { return d.migration.replica_peers; },
                  "With migration.weights=replicas: how many peers hold each rank's replicas (fewer where memory "
                  "has no room).")
                  .range(1, 1024));
  Field force = field<std::vector<std::string>>(
      "migration.force", [](Deck & d) -> auto& { return d.migration.force; },
      "Forced migration for tests and experiments (conductor run only, with migration.enabled: simulate and "
      "train-policy refuse it, they decide every help): entries `OWNER->HELPER:KINDS:SLICES` (KINDS: F, B, W, BW "
      "joined by commas), e.g. `[\"1->0:W,BW:2\"]`: every op of rank OWNER of a listed kind gives SLICES slices to "
      "rank HELPER, with no decision (the helper serves it between its own ops). One entry per owner. Empty: "
      "decided (docs/migration.md).");
  // `[]` (what resolved.yaml writes for the default) is the empty list: decided, not forced.
  force.set = [parse = force.set](Deck& d, const YAML::Node& n, const Field& self) -> std::string {
    if (n.IsSequence() && n.size() == 0) {
      d.migration.force.clear();
      return {};
    }
    return parse(d, n, self);
  };
  f.push_back(std::move(force));
}

namespace {

// Every vocabulary group holds at least one LM-head row (conductor run's groups, model/stage.hpp; the simulator's
// cost model splits the same columns).
void check_vocab(const Deck& d, const std::string& src, std::vector<std::string>& problems) {
  const MigrationConfig& m = d.migration;
  const bool vocab = std::find(m.units.begin(), m.units.end(), "vocab") != m.units.end();
  if (vocab && m.slices > d.model.vocab) {
    problems.push_back(src + ": migration.slices = " + std::to_string(m.slices) +
                       " exceeds model.vocab = " + std::to_string(d.model.vocab) +
                       " (unit 'vocab'): every slice needs at least one vocabulary column; choose fewer slices or "
                       "leave vocab out of migration.units");
  }
}

// Every MLP column group holds at least one column: with more slices than columns some groups are empty, which no
// helper can compute and which gave wrong gradients on the cpu backend (an empty group in the column split).
void check_mlp(const Deck& d, const std::string& src, std::vector<std::string>& problems) {
  const MigrationConfig& m = d.migration;
  const bool mlp = std::find(m.units.begin(), m.units.end(), "mlp") != m.units.end();
  const long long columns = static_cast<long long>(d.model.mlp_ratio) * d.model.d_model;
  if (mlp && m.slices > columns) {
    problems.push_back(src + ": migration.slices = " + std::to_string(m.slices) + " exceeds the MLP's " +
                       std::to_string(columns) + " columns (model.mlp_ratio x model.d_model; unit 'mlp'): every " +
                       "slice needs at least one column; allowed 1 .. " + std::to_string(columns) +
                       ", or leave mlp out of migration.units");
  }
}

// A head is indivisible: the slices split the heads evenly. (MLP columns and vocabulary columns are many: a
// group one column larger than another changes nothing measurable, so they need not divide.)
void check_heads(const Deck& d, const std::string& src, std::vector<std::string>& problems) {
  const MigrationConfig& m = d.migration;
  const bool heads = std::find(m.units.begin(), m.units.end(), "heads") != m.units.end();
  if (heads && m.slices > 0 && d.model.n_heads % m.slices != 0) {
    problems.push_back(src + ": migration.slices = " + std::to_string(m.slices) +
                       " does not divide model.n_heads = " + std::to_string(d.model.n_heads) +
                       " (unit 'heads'): slices are equal head groups; choose a divisor, 0 for one head per slice, or "
                       "leave heads out of migration.units");
  }
}

// Why a well-formed forced help can never move a slice ("" when it can): only B and W on a schedule whose
// backward is one op (BW), or only BW on one whose backward is always split in B and W (the zero-bubble
// generators but dualpipev, which keeps some BW). The run would report 0 slices moved. (A vocab-only entry for a rank
// without the LM head moves nothing either, but a pattern over every rank names those on purpose.)
std::string moves_nothing(const Deck& d, const plan::ForcedHelp& f) {
  const std::string& kind = d.schedule.kind;
  const bool one_backward = kind == "gpipe" || kind == "1f1b" || kind == "1f1b-interleaved";
  if (one_backward && !f.kinds[0] && !f.kinds[3]) {
    return "schedule.kind = " + kind + " runs each backward as one BW op (no B or W): this entry would move " +
           "nothing (force F or BW)";
  }
  const bool split_backward = kind.rfind("zb-", 0) == 0;  // zb-h1, zb-h2, zb-1p, zb-2p, zb-v, zb-v-greedy
  if (split_backward && !f.kinds[0] && !f.kinds[1] && !f.kinds[2]) {
    return "schedule.kind = " + kind + " splits every backward into B and W (no BW op): this entry would move " +
           "nothing (force F, B or W)";
  }
  return "";
}

// migration.force: well-formed entries, ranks in the pipeline, a helper other than the owner, one entry per
// owner, slices within migration.slices.
void check_force(const Deck& d, const std::string& src, std::vector<std::string>& problems) {
  const int p = d.parallel.pipeline, slices = d.migration.slices;
  std::vector<int> owners;
  for (const std::string& entry : d.migration.force) {
    std::string why;
    const auto f = parse_forced_help(entry, why);
    const std::string head = src + ": migration.force entry '" + entry + "': ";
    const std::size_t before = problems.size();  // an entry's other problems first
    if (!f) {
      problems.push_back(head + why);
      continue;
    }
    if (f->owner >= p || f->helper >= p || f->owner == f->helper) {
      problems.push_back(head + "owner and helper must be two different ranks in 0.." + std::to_string(p - 1) +
                         " (parallel.pipeline = " + std::to_string(p) + ")");
    }
    if (f->slices < 1 || f->slices > slices) {
      problems.push_back(head + "slices must be in 1.." + std::to_string(slices) + " (migration.slices)");
    }
    if (std::find(owners.begin(), owners.end(), f->owner) != owners.end()) {
      problems.push_back(head + "rank " + std::to_string(f->owner) +
                         " is already an owner in another entry (one "
                         "helper per owner)");
    }
    owners.push_back(f->owner);
    if (const std::string nothing = moves_nothing(d, *f); !nothing.empty() && problems.size() == before)
      problems.push_back(head + nothing);
  }
}

// "migration.force (N entries)": how both of its refusals name it.
std::string force_entries(const MigrationConfig& m) {
  return "migration.force (" + std::to_string(m.force.size()) + (m.force.size() == 1 ? " entry)" : " entries)");
}

}  // namespace

void finalize_migration(Deck& deck, const LoadOptions& options, std::vector<std::string>& problems) {
  if (deck.migration.slices == 0) deck.migration.slices = deck.model.n_heads;  // resolved.yaml shows the value
  const MigrationConfig& m = deck.migration;
  const std::string& src = options.source_name;
  if (m.link == "custom" && m.enabled && (m.bandwidth_gbps <= 0 || m.latency_us < 0)) {
    problems.push_back(src +
                       ": migration.link = custom needs migration.bandwidth_gbps > 0 and migration.latency_us >= 0 "
                       "(got " +
                       format_double(m.bandwidth_gbps) + " GB/s, " + format_double(m.latency_us) +
                       " us); or use a preset: nvlink, infiniband (no migration moves bytes for free)");
  }
  // Each unit once: a repeated unit counted its work again as movable (a larger sliced fraction than the model has).
  for (std::size_t i = 0; i < m.units.size(); ++i) {
    if (std::find(m.units.begin(), m.units.begin() + static_cast<std::ptrdiff_t>(i), m.units[i]) !=
        m.units.begin() + static_cast<std::ptrdiff_t>(i)) {
      problems.push_back(src + ": migration.units lists " + m.units[i] + " twice; name each unit once");
      break;
    }
  }
  // A forced help asks for migration; without it the entries were silently ignored.
  if (!m.enabled && !m.force.empty()) {
    problems.push_back(src + ": " + force_entries(m) +
                       " forces helps, but migration.enabled = false: set migration.enabled=true, or remove "
                       "migration.force (or set it to [])");
  }
  if (!m.enabled) return;
  if (options.command == Command::Run && m.helpers > 1) {
    problems.push_back(src + ": migration.helpers = " + std::to_string(m.helpers) +
                       ": conductor run sends an op's slices to one helper only; set migration.helpers=1 (several "
                       "helpers per op are simulated: conductor simulate)");
  }
  if (options.command == Command::Run && m.weights == "replicas") {
    problems.push_back(src +
                       ": migration.weights = replicas: conductor run sends weight slices on demand only (replicas "
                       "and their refresh are simulated: conductor simulate); set migration.weights=on_demand");
  }
  check_force(deck, src, problems);
  // The simulator and the policy's training decide every help; a forced pattern there was silently ignored.
  if ((options.command == Command::Simulate || options.command == Command::TrainPolicy) && !m.force.empty()) {
    problems.push_back(src + ": " + force_entries(m) +
                       " forces helps in conductor run only; the simulator decides every help itself: remove "
                       "migration.force (or set it to [])");
  }
  if (m.max_fraction <= 0) {
    problems.push_back(src +
                       ": migration.enabled = true with migration.max_fraction = 0 moves nothing; give a "
                       "fraction in (0, 1] or set migration.enabled=false");
  } else if (const int groups = m.slices; std::floor(m.max_fraction * groups + 1e-9) < 1) {
    // A helper takes at most floor(max_fraction x slices) slices: below one, nothing ever moved, silently.
    problems.push_back(src + ": migration.max_fraction = " + format_double(m.max_fraction) +
                       " of migration.slices = " + std::to_string(groups) +
                       " lets a helper take no slice (at most floor(" + format_double(m.max_fraction) + " x " +
                       std::to_string(groups) + ") = 0); give a fraction of at least 1/" + std::to_string(groups) +
                       ", more slices, or set migration.enabled=false");
  }
  // conductor run moves a part of a unit's groups; a unit in one group it never splits, so nothing moved.
  if (options.command == Command::Run && m.slices == 1) {
    problems.push_back(src +
                       ": migration.slices = 1 makes each op one slice, which conductor run does not move "
                       "(it sends a part of an op's groups); give migration.slices >= 2 or set "
                       "migration.enabled=false");
  }
  if (m.units.empty()) {
    problems.push_back(src + ": migration.units is empty; name at least one of heads, mlp, vocab");
  }
  check_heads(deck, src, problems);
  check_mlp(deck, src, problems);
  check_vocab(deck, src, problems);
}

}  // namespace conductor::config
