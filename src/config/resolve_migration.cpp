// The migration section resolved into plan::Migration: link numbers and the slice cost model (docs/migration.md).
#include <algorithm>
#include <string>

#include "conductor/config/resolve.hpp"
#include "conductor/plan/flops.hpp"
#include "conductor/util/error.hpp"

namespace conductor::config {

LinkPreset link_preset(const std::string& link) {
  if (link == "nvlink") return {300.0, 5.0};
  if (link == "infiniband") return {25.0, 10.0};
  return {0.0, -1.0};
}

std::optional<plan::ForcedHelp> parse_forced_help(const std::string& entry, std::string& why) {
  plan::ForcedHelp f;
  const std::size_t arrow = entry.find("->");
  const std::size_t colon1 = entry.find(':', arrow == std::string::npos ? 0 : arrow);
  const std::size_t colon2 = colon1 == std::string::npos ? colon1 : entry.find(':', colon1 + 1);
  const auto number = [](const std::string& text, int& out) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 6) return false;
    out = std::stoi(text);
    return true;
  };
  if (arrow == std::string::npos || colon2 == std::string::npos || !number(entry.substr(0, arrow), f.owner) ||
      !number(entry.substr(arrow + 2, colon1 - arrow - 2), f.helper) || !number(entry.substr(colon2 + 1), f.slices)) {
    why = "expected OWNER->HELPER:KINDS:SLICES with ranks and slices as numbers, e.g. 1->0:W,BW:2";
    // `[1->0:W,BW:2]` unquoted is the two entries '1->0:W' and 'BW:2': YAML splits a flow list at commas.
    if (arrow != std::string::npos && colon1 != std::string::npos && colon2 == std::string::npos) {
      why +=
          " (several KINDS hold commas: quote the entry inside the list, e.g. migration.force='[\"1->0:W,BW:2\"]' "
          "on the command line, or force: [\"1->0:W,BW:2\"] in a deck)";
    }
    return std::nullopt;
  }
  const std::string kinds = entry.substr(colon1 + 1, colon2 - colon1 - 1);
  for (std::size_t at = 0; at <= kinds.size();) {
    const std::size_t comma = std::min(kinds.find(',', at), kinds.size());
    const std::string k = kinds.substr(at, comma - at);
    const int index = k == "F" ? 0 : k == "B" ? 1 : k == "W" ? 2 : k == "BW" ? 3 : -1;
    if (index < 0) {
      why = "op kind '" + k + "' is not one of F, B, W, BW";
      return std::nullopt;
    }
    if (f.kinds[static_cast<std::size_t>(index)]) {
      why = "op kind '" + k + "' is listed twice; name each of F, B, W, BW once";
      return std::nullopt;
    }
    f.kinds[static_cast<std::size_t>(index)] = true;
    at = comma + 1;
  }
  return f;
}

namespace {

// One rank's share, in elements and FLOPs: `layers` transformer layers, the LM head when `head`, the encoder of
// cost.encoder_tflop when `encoder` (never sliced: part of the op's fixed part).
struct Share {
  int layers = 0;
  bool head = false, encoder = false;
};

// Accumulates one unit's FLOPs (owner, helper) and bytes (fixed, per slice) of one op kind, in elements.
struct Part {
  double flops = 0, helper_flops = 0, fixed = 0, per_slice = 0;
  int messages = 0;
  double weights = 0;  // of per_slice: the weight slice sent out (none where a replica is held)
};

void add(Part& to, const Part& x) {
  to.flops += x.flops;
  to.helper_flops += x.helper_flops;
  to.fixed += x.fixed;
  to.per_slice += x.per_slice;
  to.messages += x.messages;
  to.weights += x.weights;
}

// The three op kinds (F, B, W) of each unit for one rank: FLOPs in the cost model's terms (plan/flops.hpp: per
// layer and pass the attention projections and the MLP's matmuls, the attention core once in F and twice in B;
// the LM head per pass) and the tensors a helper receives and returns (elements; G slices):
//   heads  F: layer input out, partial output back; per slice QKV+proj weights 4h^2/G, stash q,k,v,o + lse back
//          B: output grad out, input-grad partial back; per slice weights, the stash out, dqkv 3th/G back
//          W: LN1 output + output grad out; per slice dqkv + context 4th/G out, weight grads 4h^2/G back
//   mlp    F: as heads; per slice fc1+fc2 weights 2rh^2/G, fc1 pre-activation rth/G back
//          B: as heads; per slice weights, pre-activation out, its gradient back
//          W: LN2 output + output grad out; per slice pre-activation and its gradient out, weight grads back
//   vocab  F: hidden out, per-token max, sum of exponentials and target logit back (3t: the vocabulary-parallel
//          loss, never logits); per slice weights hV/G
//          B: hidden + global max and sum out, input-grad partial back; the helper recomputes its logits
//          W: hidden + max and sum out; per slice weights out (logits recomputed), weight grads back
// Messages: one out and one back per unit and layer (the owner adds the partials before the next layer).
std::array<Part, 3> unit_parts(const Deck& d, const std::string& unit, const Share& share) {
  const plan::ModelDims m = resolved_model(d.model);
  const double t = static_cast<double>(d.parallel.microbatch_size) * d.model.seq_len;
  const double h = d.model.d_model, a = d.model.n_heads, r = d.model.mlp_ratio;
  const double G = d.migration.slices, L = share.layers;
  const double proj = t * plan::layer_projection_flops_per_token(m), att = t * plan::layer_attention_flops_per_token(m);
  const double mlp = t * plan::layer_mlp_flops_per_token(m);
  std::array<Part, 3> p{};
  if (unit == "heads") {
    const double w = 4 * h * h / G, stash = (4 * t * h + a * t) / G;
    p[0] = {L * (proj + att), 0, L * 2 * t * h, L * (w + stash), 2 * share.layers};
    p[1] = {L * (proj + 2 * att), 0, L * 2 * t * h, L * (w + stash + 3 * t * h / G), 2 * share.layers};
    p[2] = {L * proj, 0, L * 2 * t * h, L * (4 * t * h / G + w), 2 * share.layers};
    p[0].weights = p[1].weights = L * w;  // W's per-slice w is the weight gradients coming back
  } else if (unit == "mlp") {
    const double w = 2 * r * h * h / G, pre = r * t * h / G;
    p[0] = {L * mlp, 0, L * 2 * t * h, L * (w + pre), 2 * share.layers};
    p[1] = {L * mlp, 0, L * 2 * t * h, L * (w + 2 * pre), 2 * share.layers};
    p[2] = {L * mlp, 0, L * 2 * t * h, L * (2 * pre + w), 2 * share.layers};
    p[0].weights = p[1].weights = L * w;
  } else if (unit == "vocab" && share.head) {
    const double head = t * plan::head_flops_per_token(m), w = h * d.model.vocab / G;
    p[0] = {head, head, t * h + 3 * t, w, 2};
    p[1] = {head, 2 * head, 2 * t * h + 2 * t, w, 2};
    p[2] = {head, 2 * head, t * h + 2 * t, 2 * w, 2};
    p[0].weights = p[1].weights = p[2].weights = w;  // W: the weights out (logits recomputed), gradients back
  }
  for (Part& x : p) {
    if (x.helper_flops == 0) x.helper_flops = x.flops;
  }
  return p;
}

// Total FLOPs of one rank's F, B, W (costs_from_model's terms): the denominator of the sliced fraction.
std::array<double, 3> total_flops(const Deck& d, const Share& share) {
  const plan::ModelDims m = resolved_model(d.model);
  const double t = static_cast<double>(d.parallel.microbatch_size) * d.model.seq_len, L = share.layers;
  const double mm = t * plan::layer_matmul_flops_per_token(m), att = t * plan::layer_attention_flops_per_token(m);
  const double head = share.head ? t * plan::head_flops_per_token(m) : 0;
  std::array<double, 3> total = {L * (mm + att) + head, L * (mm + 2 * att) + head, L * mm + head};
  if (share.encoder) {
    for (int k = 0; k < 3; ++k) total[static_cast<std::size_t>(k)] += encoder_flops(d, k);
  }
  return total;
}

}  // namespace

plan::Migration migration_from_model(const Deck& d) {
  plan::Migration m;
  const MigrationConfig& c = d.migration;
  m.enabled = c.enabled;
  m.slices = c.slices;
  m.max_fraction = c.max_fraction;
  m.helpers = c.helpers;
  m.replicas = c.weights == "replicas";
  m.replica_peers = c.replica_peers;
  m.link = c.link;
  const LinkPreset preset = link_preset(c.link);
  m.bandwidth_gbps = c.bandwidth_gbps > 0 ? c.bandwidth_gbps : preset.bandwidth_gbps;
  m.latency_ms = (c.latency_us >= 0 ? c.latency_us : preset.latency_us) * 1e-3;
  if (!m.enabled) return m;
  std::string why;
  for (const std::string& entry : c.force) m.force.push_back(*parse_forced_help(entry, why));  // checked by now
  if (std::find(c.units.begin(), c.units.end(), "mlp") != c.units.end()) m.mlp_groups = c.slices;
  if (std::find(c.units.begin(), c.units.end(), "heads") != c.units.end()) m.head_groups = c.slices;
  if (std::find(c.units.begin(), c.units.end(), "vocab") != c.units.end()) m.vocab_groups = c.slices;
  const int p = d.parallel.pipeline;
  const double elem = c.element_bytes > 0 ? c.element_bytes : d.model.precision == "fp32" ? 4.0 : 2.0;
  const double t = static_cast<double>(d.parallel.microbatch_size) * d.model.seq_len;
  for (int r = 0; r < p; ++r) {
    const Share share{rank_layers(d, r), r == p - 1, r == 0};
    std::array<Part, 3> sum{};
    for (const std::string& unit : c.units) {
      const std::array<Part, 3> u = unit_parts(d, unit, share);
      for (int k = 0; k < 3; ++k) add(sum[k], u[k]);
    }
    const std::array<double, 3> total = total_flops(d, share);
    std::array<plan::SliceCosts, 3> ops{};
    for (int k = 0; k < 3; ++k) {
      const Part& x = sum[k];
      ops[k].sliced_fraction = total[k] > 0 ? std::min(1.0, x.flops / total[k]) : 0.0;
      ops[k].helper_factor = x.flops > 0 ? x.helper_flops / x.flops : 1.0;
      ops[k].bytes_fixed = x.fixed * elem;
      ops[k].bytes_per_slice = x.per_slice * elem;
      ops[k].messages = x.messages;
      ops[k].weight_bytes_per_slice = x.weights * elem;
    }
    m.ops.push_back(ops);
    // A replica holds every slice of the rank's sliced weights: F's weight slices (every unit's) times G.
    m.replica_bytes.push_back(ops[0].weight_bytes_per_slice * c.slices);
    // The Zero Bubble paper's activations of one microbatch per layer (34 s b h + 5 a s^2 b bytes at 16 bits),
    // at this precision.
    const double per_layer = (17.0 * t * d.model.d_model + 2.5 * d.model.n_heads * d.model.seq_len * t) * elem;
    m.memory_unit_bytes.push_back(std::max(1, share.layers) * per_layer);
  }
  return m;
}

}  // namespace conductor::config
