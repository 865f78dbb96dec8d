// StageModel: parameters, per-microbatch buffers and the F / B / W / optimizer steps of the held virtual stages.
#include "conductor/model/stage.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "conductor/util/error.hpp"

namespace conductor::model {

std::vector<int> split_layers(const config::Deck& deck, int num_virtual_stages) {
  const int L = deck.model.n_layers;
  const auto& explicit_list = deck.model.layers_per_stage;
  if (num_virtual_stages < 1) throw InputError("model: number of virtual stages must be >= 1");
  if (!explicit_list.empty()) {
    if (static_cast<int>(explicit_list.size()) != num_virtual_stages) {
      throw InputError("model.layers_per_stage has " + std::to_string(explicit_list.size()) +
                       " entries but there are " + std::to_string(num_virtual_stages) + " virtual stages");
    }
    long long sum = 0;
    for (int l : explicit_list) {
      if (l < 0) throw InputError("model.layers_per_stage: entries must be >= 0, got " + std::to_string(l));
      sum += l;
    }
    if (sum != L) {
      throw InputError("model.layers_per_stage sums to " + std::to_string(sum) +
                       " but model.n_layers = " + std::to_string(L));
    }
    return explicit_list;
  }
  if (L < num_virtual_stages) {
    throw InputError("model.n_layers = " + std::to_string(L) + " is fewer than the " +
                     std::to_string(num_virtual_stages) +
                     " virtual stages; add layers or list model.layers_per_stage explicitly");
  }
  std::vector<int> out(num_virtual_stages, L / num_virtual_stages);
  for (int i = 0; i < L % num_virtual_stages; i++) out[i]++;
  return out;
}

double learning_rate(const config::Deck& deck, int step) {
  const auto& o = deck.optim;
  const double lr_min = o.lr * o.lr_min_ratio;
  if (step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  const int decay = o.decay_steps > 0 ? o.decay_steps : deck.run.steps;
  if (decay <= o.warmup_steps) return o.lr;
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / (decay - o.warmup_steps));
  return lr_min + 0.5 * (o.lr - lr_min) * (1.0 + std::cos(std::numbers::pi * progress));
}

// ------------------------------------------------------------------------------------------------ internals
struct StageModel::Micro {
  DeviceBuffer floats, ints;
  std::vector<LayerActs> layers;
  std::vector<float*> res, dres;  // [L+1] residual stream and its gradient, each [B,T,C]
  int* tokens = nullptr;          // [B,T] (first stage)
  int* targets = nullptr;         // [B,T] (last stage)
  float* lnf = nullptr;           // [B,T,C]
  float* meanf = nullptr;         // [B,T]
  float* rstdf = nullptr;         // [B,T]
  float* logits = nullptr;        // [B,T,V]
  float* probs = nullptr;         // [B,T,V], becomes dlogits in B
  float* losses = nullptr;        // [B,T]
  float* dlnf = nullptr;          // [B,T,C]
};

struct StageModel::VStage {
  int vs = 0, first_layer = 0, n_layers = 0;
  bool embedding = false, head = false;
  std::vector<TensorInfo> tensors;
  std::size_t n_params = 0;
  DeviceBuffer params, grads, adam_m, adam_v;
  std::vector<LayerView> w, g;  // per layer, into params / grads
  std::size_t micro_floats = 0, micro_ints = 0;
  std::vector<std::unique_ptr<Micro>> active;  // per microbatch; null when not in flight
  std::vector<int> phase;                      // 0 idle, 1 after F, 2 after B
  std::vector<std::unique_ptr<Micro>> pool;    // released buffers, reused by the next F
  std::size_t offset(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return t.offset;
    }
    throw Error("model: no tensor " + name);
  }
};

namespace {

void init_tensor(std::vector<float>& host, const TensorInfo& t, unsigned long long seed, float std, float constant) {
  if (std == 0.0f) {
    std::fill(host.begin() + t.offset, host.begin() + t.offset + t.numel, constant);
    return;
  }
  // Each tensor has its own stream keyed by its global name, so a split over stages does not change the model.
  std::uint64_t key = 1469598103934665603ull;
  for (char c : t.name) key = (key ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const std::uint64_t stream = mix(seed, key);
  for (std::size_t i = 0; i < t.numel; i += 2) {  // Box-Muller, two normals per pair of uniforms
    const double u1 = (static_cast<double>(mix(stream, i) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(mix(stream, i + 1) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    host[t.offset + i] = static_cast<float>(std * r * std::cos(2 * std::numbers::pi * u2));
    if (i + 1 < t.numel) host[t.offset + i + 1] = static_cast<float>(std * r * std::sin(2 * std::numbers::pi * u2));
  }
}

}  // namespace

StageModel::StageModel(const config::Deck& deck, std::vector<int> virtual_stages_held, int num_virtual_stages,
                       Backend* backend)
    : deck_(deck),
      held_(std::move(virtual_stages_held)),
      num_vs_(num_virtual_stages),
      microbatches_(deck.parallel.microbatches),
      data_(deck) {
  if (backend) {
    backend_ = backend;
  } else {
    owned_backend_ = make_backend(deck.backend == "emulated" ? "cpu" : deck.backend);
    backend_ = owned_backend_.get();
  }
  const auto& m = deck.model;
  if (m.d_model % m.n_heads != 0) {
    throw InputError("model.n_heads = " + std::to_string(m.n_heads) +
                     " does not divide model.d_model = " + std::to_string(m.d_model));
  }
  dims_ = Dims{deck.parallel.microbatch_size, m.seq_len, m.d_model, m.n_heads, m.d_model / m.n_heads,
               m.d_model * m.mlp_ratio,       m.vocab};
  if (held_.empty()) throw InputError("model: a stage model must hold at least one virtual stage");
  const std::vector<int> split = split_layers(deck, num_vs_);
  losses_.assign(microbatches_, std::numeric_limits<double>::quiet_NaN());
  loss_pending_.assign(microbatches_, 0);
  const bool embeds = std::find(held_.begin(), held_.end(), 0) != held_.end();
  if (embeds || std::find(held_.begin(), held_.end(), num_vs_ - 1) != held_.end()) {
    const std::size_t ids = static_cast<std::size_t>(microbatches_) * dims_.BT() * sizeof(int);
    step_tokens_ = DeviceBuffer(*backend_, ids);
    step_targets_ = DeviceBuffer(*backend_, ids);
  }
  if (std::find(held_.begin(), held_.end(), num_vs_ - 1) != held_.end()) {
    step_token_losses_ = DeviceBuffer(*backend_, static_cast<std::size_t>(microbatches_) * dims_.BT() * sizeof(float));
  }
  const Dims& d = dims_;
  const int C = d.C, F = d.F, V = d.V;
  const float proj_std = 0.02f / std::sqrt(2.0f * m.n_layers);

  for (int vs : held_) {
    if (vs < 0 || vs >= num_vs_) {
      throw InputError("model: virtual stage " + std::to_string(vs) + " is outside 0.." + std::to_string(num_vs_ - 1));
    }
    if (index_.count(vs)) throw InputError("model: virtual stage " + std::to_string(vs) + " listed twice");
    auto s = std::make_unique<VStage>();
    s->vs = vs;
    for (int i = 0; i < vs; i++) s->first_layer += split[i];
    s->n_layers = split[vs];
    s->embedding = vs == 0;
    s->head = vs == num_vs_ - 1;
    auto add = [&](const std::string& name, std::vector<int> shape, bool decay) {
      TensorInfo t;
      t.name = name;
      t.numel = 1;
      for (int x : shape) t.numel *= static_cast<std::size_t>(x);
      t.shape = std::move(shape);
      t.offset = s->n_params;
      t.decay = decay;
      s->n_params += (t.numel + 15) / 16 * 16;  // 64-byte aligned tensors
      s->tensors.push_back(std::move(t));
    };
    if (s->embedding) {
      add("wte", {V, C}, true);
      add("wpe", {d.T, C}, true);
    }
    for (int l = 0; l < s->n_layers; l++) {
      const std::string p = "layer" + std::to_string(s->first_layer + l) + ".";
      add(p + "ln1_w", {C}, false);
      add(p + "ln1_b", {C}, false);
      add(p + "qkv_w", {d.NH, 3, d.HS, C}, true);
      add(p + "qkv_b", {d.NH, 3, d.HS}, false);
      add(p + "proj_w", {C, C}, true);
      add(p + "proj_b", {C}, false);
      add(p + "ln2_w", {C}, false);
      add(p + "ln2_b", {C}, false);
      add(p + "fc_w", {F, C}, true);
      add(p + "fc_b", {F}, false);
      add(p + "fcproj_w", {F, C}, true);
      add(p + "fcproj_b", {C}, false);
    }
    if (s->head) {
      add("lnf_w", {C}, false);
      add("lnf_b", {C}, false);
      add("lm_head_w", {V, C}, true);
    }
    // Initialisation (GPT-2): N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layers), LN = (1, 0).
    std::vector<float> host(s->n_params, 0.0f);
    for (const auto& t : s->tensors) {
      const std::string kind = t.name.substr(t.name.find('.') + 1);
      float std = 0.0f, constant = 0.0f;
      if (kind == "ln1_w" || kind == "ln2_w" || kind == "lnf_w")
        constant = 1.0f;
      else if (kind == "proj_w" || kind == "fcproj_w")
        std = proj_std;
      else if (t.decay)
        std = 0.02f;
      init_tensor(host, t, m.init_seed, std, constant);
    }
    const std::size_t bytes = s->n_params * sizeof(float);
    s->params = DeviceBuffer(*backend_, bytes);
    s->grads = DeviceBuffer(*backend_, bytes);
    s->adam_m = DeviceBuffer(*backend_, bytes);
    s->adam_v = DeviceBuffer(*backend_, bytes);
    backend_->upload(s->params.get(), host.data(), bytes);
    backend_->zero(s->grads.get(), bytes);
    backend_->zero(s->adam_m.get(), bytes);
    backend_->zero(s->adam_v.get(), bytes);
    for (int l = 0; l < s->n_layers; l++) {
      const std::string p = "layer" + std::to_string(s->first_layer + l) + ".";
      auto view = [&](float* base) {
        LayerView v;
        v.ln1_w = base + s->offset(p + "ln1_w");
        v.ln1_b = base + s->offset(p + "ln1_b");
        v.qkv_w = base + s->offset(p + "qkv_w");
        v.qkv_b = base + s->offset(p + "qkv_b");
        v.proj_w = base + s->offset(p + "proj_w");
        v.proj_b = base + s->offset(p + "proj_b");
        v.ln2_w = base + s->offset(p + "ln2_w");
        v.ln2_b = base + s->offset(p + "ln2_b");
        v.fc_w = base + s->offset(p + "fc_w");
        v.fc_b = base + s->offset(p + "fc_b");
        v.fcproj_w = base + s->offset(p + "fcproj_w");
        v.fcproj_b = base + s->offset(p + "fcproj_b");
        return v;
      };
      s->w.push_back(view(s->params.f()));
      s->g.push_back(view(s->grads.f()));
    }
    layout_micro(*s, nullptr, nullptr, nullptr, s->micro_floats, s->micro_ints);
    s->active.resize(microbatches_);
    s->phase.assign(microbatches_, 0);
    index_[vs] = static_cast<int>(stages_.size());
    stages_.push_back(std::move(s));
  }
  scratch_dy_ = DeviceBuffer(*backend_, static_cast<std::size_t>(d.BT()) * C * sizeof(float));
  scratch_datt_ = DeviceBuffer(*backend_, static_cast<std::size_t>(d.B) * d.NH * d.T * d.T * sizeof(float));
}

StageModel::~StageModel() = default;

// Carves one microbatch's buffers out of two allocations (floats, ints). Called once with null bases to size
// them, then per new Micro with the real bases.
void StageModel::layout_micro(const VStage& s, Micro* m, float* base, int* ibase, std::size_t& nfloats,
                              std::size_t& nints) const {
  const Dims& d = dims_;
  const std::size_t BT = d.BT(), btc = BT * d.C;
  std::size_t off = 0, ioff = 0;
  auto take = [&](std::size_t n) -> float* {
    float* p = base ? base + off : nullptr;
    off += (n + 15) / 16 * 16;
    return p;
  };
  auto itake = [&](std::size_t n) -> int* {
    int* p = ibase ? ibase + ioff : nullptr;
    ioff += (n + 15) / 16 * 16;
    return p;
  };
  const int L = s.n_layers;
  std::vector<float*> res(L + 1), dres(L + 1);
  for (int i = 0; i <= L; i++) res[i] = take(btc);
  for (int i = 0; i <= L; i++) dres[i] = take(btc);
  std::vector<LayerActs> layers(L);
  for (int l = 0; l < L; l++) {
    LayerActs& a = layers[l];
    a.x = res[l];
    a.out = res[l + 1];
    a.dx = dres[l];
    a.dout = dres[l + 1];
    a.ln1 = take(btc);
    a.mean1 = take(BT);
    a.rstd1 = take(BT);
    a.x2 = take(btc);
    a.ln2 = take(btc);
    a.mean2 = take(BT);
    a.rstd2 = take(BT);
    a.attn.qkv = take(3 * btc);
    a.attn.att = take(static_cast<std::size_t>(d.B) * d.NH * d.T * d.T);
    a.attn.y = take(btc);
    a.attn.dqkv = take(3 * btc);
    a.attn.dy = scratch_dy_.f();
    a.attn.datt = scratch_datt_.f();
    a.mlp.h = take(BT * d.F);
    a.mlp.gelu = take(BT * d.F);
    a.mlp.dh = take(BT * d.F);
    a.dx2 = take(btc);
    a.dln1 = take(btc);
    a.dln2 = take(btc);
  }
  float *lnf = nullptr, *meanf = nullptr, *rstdf = nullptr, *logits = nullptr, *probs = nullptr, *losses = nullptr,
        *dlnf = nullptr;
  int *tokens = nullptr, *targets = nullptr;
  if (s.embedding) tokens = itake(BT);
  if (s.head) {
    targets = itake(BT);
    lnf = take(btc);
    meanf = take(BT);
    rstdf = take(BT);
    logits = take(BT * d.V);
    probs = take(BT * d.V);
    losses = take(BT);
    dlnf = take(btc);
  }
  nfloats = off;
  nints = ioff;
  if (m) {
    m->layers = std::move(layers);
    m->res = std::move(res);
    m->dres = std::move(dres);
    m->tokens = tokens;
    m->targets = targets;
    m->lnf = lnf;
    m->meanf = meanf;
    m->rstdf = rstdf;
    m->logits = logits;
    m->probs = probs;
    m->losses = losses;
    m->dlnf = dlnf;
  }
}

bool StageModel::holds(int vs) const { return index_.count(vs) > 0; }

StageModel::VStage& StageModel::stage(int vs) {
  auto it = index_.find(vs);
  if (it == index_.end()) throw Error("model: virtual stage " + std::to_string(vs) + " is not held here");
  return *stages_[it->second];
}
const StageModel::VStage& StageModel::stage(int vs) const { return const_cast<StageModel*>(this)->stage(vs); }

int StageModel::first_layer(int vs) const { return stage(vs).first_layer; }
int StageModel::num_layers(int vs) const { return stage(vs).n_layers; }
std::size_t StageModel::parameter_count(int vs) const {
  std::size_t n = 0;
  for (const auto& t : stage(vs).tensors) n += t.numel;
  return n;
}

std::size_t StageModel::activation_bytes_per_microbatch(int vs) const {
  const VStage& s = stage(vs);
  return s.micro_floats * sizeof(float) + s.micro_ints * sizeof(int);
}
std::size_t StageModel::activation_bytes_per_microbatch() const {
  std::size_t best = 0;
  for (int vs : held_) best = std::max(best, activation_bytes_per_microbatch(vs));
  return best;
}

int StageModel::in_flight(int vs) const {
  const VStage& s = stage(vs);
  return static_cast<int>(std::count_if(s.phase.begin(), s.phase.end(), [](int p) { return p != 0; }));
}

StageModel::Micro& StageModel::micro(VStage& s, int vs, int mb, int expected_phase, const char* op) {
  if (mb < 0 || mb >= microbatches_) {
    throw Error(std::string("model: ") + op + " of microbatch " + std::to_string(mb) + " outside 0.." +
                std::to_string(microbatches_ - 1));
  }
  static const char* names[] = {"not started (or already finished)", "after its forward", "after its backward_input"};
  if (s.phase[mb] != expected_phase) {
    throw Error(std::string("model: ") + op + " of virtual stage " + std::to_string(vs) + " microbatch " +
                std::to_string(mb) + " but the microbatch is " + names[s.phase[mb]]);
  }
  if (expected_phase == 0) {
    if (!s.pool.empty()) {
      s.active[mb] = std::move(s.pool.back());
      s.pool.pop_back();
    } else {
      auto m = std::make_unique<Micro>();
      m->floats = DeviceBuffer(*backend_, s.micro_floats * sizeof(float));
      m->ints = DeviceBuffer(*backend_, std::max<std::size_t>(1, s.micro_ints) * sizeof(int));
      std::size_t nf = 0, ni = 0;
      layout_micro(s, m.get(), m->floats.f(), m->ints.i(), nf, ni);
      s.active[mb] = std::move(m);
    }
  }
  return *s.active[mb];
}

void StageModel::begin_step(int step) {
  for (auto& s : stages_) {
    for (int mb = 0; mb < microbatches_; mb++) {
      if (s->phase[mb] != 0) {
        throw Error("model: begin_step(" + std::to_string(step) + ") while microbatch " + std::to_string(mb) +
                    " of virtual stage " + std::to_string(s->vs) + " is still in flight");
      }
    }
    backend_->zero(s->grads.get(), s->n_params * sizeof(float));
  }
  step_ = step;
  std::fill(losses_.begin(), losses_.end(), std::numeric_limits<double>::quiet_NaN());
  std::fill(loss_pending_.begin(), loss_pending_.end(), 0);
  upload_step_tokens();
}

void StageModel::upload_step_tokens() {
  // All microbatches of the step in one upload each, at the step boundary: a per-forward upload from pageable
  // host memory may synchronise the device stream (CUDA), stalling the ops queued behind it.
  if (!step_tokens_.get() || tokens_step_ == step_) return;
  const std::size_t bt = dims_.BT();
  std::vector<int> inputs(static_cast<std::size_t>(microbatches_) * bt), targets(inputs.size());
  for (int mb = 0; mb < microbatches_; mb++) {
    data_.microbatch(step_, mb, host_inputs_, host_targets_);
    std::copy(host_inputs_.begin(), host_inputs_.end(), inputs.begin() + static_cast<std::ptrdiff_t>(mb * bt));
    std::copy(host_targets_.begin(), host_targets_.end(), targets.begin() + static_cast<std::ptrdiff_t>(mb * bt));
  }
  backend_->upload(step_tokens_.get(), inputs.data(), inputs.size() * sizeof(int));
  backend_->upload(step_targets_.get(), targets.data(), targets.size() * sizeof(int));
  tokens_step_ = step_;
}

void StageModel::forward(int vs, int mb, const float* in, float* out) {
  VStage& s = stage(vs);
  if (!s.embedding && !in) {
    throw Error("model: forward of virtual stage " + std::to_string(vs) + " needs an input tensor");
  }
  if (!s.head && !out) throw Error("model: forward of virtual stage " + std::to_string(vs) + " needs an output tensor");
  Micro& m = micro(s, vs, mb, 0, "forward");
  const Dims& d = dims_;
  const std::size_t btc_bytes = activation_elements() * sizeof(float);
  if (s.embedding || s.head) upload_step_tokens();
  if (s.embedding) {
    m.tokens = step_tokens_.i() + static_cast<std::size_t>(mb) * d.BT();
    const float* wte = s.params.f() + s.offset("wte");
    const float* wpe = s.params.f() + s.offset("wpe");
    backend_->encoder_forward(m.res[0], m.tokens, wte, wpe, d.B, d.T, d.C);
  } else {
    backend_->copy(m.res[0], in, btc_bytes);
  }
  for (int l = 0; l < s.n_layers; l++) layer_forward(*backend_, m.layers[l], s.w[l], d);
  float* x = m.res[s.n_layers];
  if (s.head) {
    m.targets = step_targets_.i() + static_cast<std::size_t>(mb) * d.BT();
    const float* p = s.params.f();
    backend_->layernorm_forward(m.lnf, m.meanf, m.rstdf, x, p + s.offset("lnf_w"), p + s.offset("lnf_b"), d.B, d.T,
                                d.C);
    backend_->gemm(m.logits, m.lnf, p + s.offset("lm_head_w"), static_cast<int>(d.BT()), d.V, d.C, false, true, 1.0f,
                   0.0f);
    backend_->crossentropy_forward(m.losses, m.probs, m.logits, m.targets, d.B, d.T, d.V);
    // The token losses stay on the backend until someone asks (loss(), step_loss()): reading them here would
    // block the host on the device after every last-stage forward.
    backend_->copy(step_token_losses_.f() + static_cast<std::size_t>(mb) * d.BT(), m.losses, d.BT() * sizeof(float));
    loss_pending_[mb] = 1;
  } else {
    backend_->copy(out, x, btc_bytes);
  }
  s.phase[mb] = 1;
}

void StageModel::backward_input(int vs, int mb, const float* grad_out, float* grad_in) {
  VStage& s = stage(vs);
  if (!s.head && !grad_out) {
    throw Error("model: backward_input of virtual stage " + std::to_string(vs) + " needs an output gradient");
  }
  if (!s.embedding && !grad_in) {
    throw Error("model: backward_input of virtual stage " + std::to_string(vs) + " needs an input-gradient tensor");
  }
  Micro& m = micro(s, vs, mb, 1, "backward_input");
  const Dims& d = dims_;
  const std::size_t btc_bytes = activation_elements() * sizeof(float);
  const int L = s.n_layers;
  if (s.head) {
    // d(loss)/d(logits) with loss = (1/m) sum over microbatches of the mean over its B*T tokens.
    const float scale = 1.0f / (static_cast<float>(microbatches_) * static_cast<float>(d.BT()));
    backend_->crossentropy_backward(m.probs, m.probs, m.targets, scale, d.B, d.T, d.V);
    const float* p = s.params.f();
    backend_->gemm(m.dlnf, m.probs, p + s.offset("lm_head_w"), static_cast<int>(d.BT()), d.C, d.V, false, false, 1.0f,
                   0.0f);
    backend_->zero(m.dres[L], btc_bytes);
    backend_->layernorm_backward_input(m.dres[L], m.dlnf, m.res[L], p + s.offset("lnf_w"), m.meanf, m.rstdf, d.B, d.T,
                                       d.C);
  } else {
    backend_->copy(m.dres[L], grad_out, btc_bytes);
  }
  for (int l = L - 1; l >= 0; l--) layer_backward_input(*backend_, m.layers[l], s.w[l], d);
  if (!s.embedding) {
    backend_->copy(grad_in, m.dres[0], btc_bytes);
  }
  s.phase[mb] = 2;
}

void StageModel::backward_weight(int vs, int mb) {
  VStage& s = stage(vs);
  Micro& m = micro(s, vs, mb, 2, "backward_weight");
  const Dims& d = dims_;
  const int L = s.n_layers;
  if (s.head) {
    float* g = s.grads.f();
    backend_->gemm(g + s.offset("lm_head_w"), m.probs, m.lnf, d.V, d.C, static_cast<int>(d.BT()), true, false, 1.0f,
                   1.0f);
    backend_->layernorm_backward_weight(g + s.offset("lnf_w"), g + s.offset("lnf_b"), m.dlnf, m.res[L], m.meanf,
                                        m.rstdf, d.B, d.T, d.C);
  }
  for (int l = L - 1; l >= 0; l--) layer_backward_weight(*backend_, m.layers[l], s.g[l], d);
  if (s.embedding) {
    float* g = s.grads.f();
    backend_->encoder_backward(g + s.offset("wte"), g + s.offset("wpe"), m.dres[0], m.tokens, d.B, d.T, d.C);
  }
  s.pool.push_back(std::move(s.active[mb]));
  s.phase[mb] = 0;
}

void StageModel::backward_full(int vs, int mb, const float* grad_out, float* grad_in) {
  backward_input(vs, mb, grad_out, grad_in);
  backward_weight(vs, mb);
}

double StageModel::loss(int mb) const {
  if (!holds(num_vs_ - 1)) throw Error("model: loss() is only known on the rank holding the last virtual stage");
  if (mb < 0 || mb >= microbatches_) throw Error("model: loss of microbatch " + std::to_string(mb) + " out of range");
  fetch_losses();
  return losses_[mb];
}

void StageModel::fetch_losses() const {
  if (std::find(loss_pending_.begin(), loss_pending_.end(), 1) == loss_pending_.end()) return;
  const std::size_t bt = dims_.BT();
  std::vector<float> host(static_cast<std::size_t>(microbatches_) * bt);
  backend_->download(host.data(), step_token_losses_.get(), host.size() * sizeof(float));
  for (int mb = 0; mb < microbatches_; mb++) {
    if (!loss_pending_[mb]) continue;
    double sum = 0.0;
    for (std::size_t i = 0; i < bt; i++) sum += host[static_cast<std::size_t>(mb) * bt + i];
    losses_[mb] = sum / static_cast<double>(bt);
    loss_pending_[mb] = 0;
  }
}

double StageModel::step_loss() const {
  double sum = 0.0;
  for (int mb = 0; mb < microbatches_; mb++) sum += loss(mb);
  return sum / microbatches_;
}

double StageModel::local_grad_sq_norm() const {
  std::vector<const float*> xs;
  std::vector<std::size_t> ns;
  for (const auto& s : stages_) {
    for (const auto& t : s->tensors) {
      xs.push_back(s->grads.f() + t.offset);
      ns.push_back(t.numel);
    }
  }
  std::vector<double> each(xs.size(), 0.0);
  backend_->sum_squares_each(each.data(), xs.data(), ns.data(), static_cast<int>(xs.size()));
  double total = 0.0;
  for (double v : each) total += v;  // the tensors' order: the same sum on every backend and rank count
  return total;
}

void StageModel::optimizer_step(double global_grad_norm, int step) {
  const auto& o = deck_.optim;
  double scale = 1.0;
  if (o.grad_clip > 0) scale = std::min(1.0, o.grad_clip / (global_grad_norm + 1e-6));
  const float lr = static_cast<float>(learning_rate(deck_, step));
  for (auto& s : stages_) {
    for (const auto& t : s->tensors) {
      backend_->adamw_update(s->params.f() + t.offset, s->adam_m.f() + t.offset, s->adam_v.f() + t.offset,
                             s->grads.f() + t.offset, t.numel, lr, static_cast<float>(o.beta1),
                             static_cast<float>(o.beta2), static_cast<float>(o.eps),
                             t.decay ? static_cast<float>(o.weight_decay) : 0.0f, static_cast<float>(scale), step + 1);
    }
  }
}

const std::vector<TensorInfo>& StageModel::tensors(int vs) const { return stage(vs).tensors; }

namespace {
float* buffer_of(const DeviceBuffer& p, const DeviceBuffer& g, const DeviceBuffer& m, const DeviceBuffer& v,
                 Buffer which) {
  switch (which) {
    case Buffer::Params: return p.f();
    case Buffer::Grads: return g.f();
    case Buffer::AdamM: return m.f();
    case Buffer::AdamV: return v.f();
  }
  return nullptr;
}
}  // namespace

std::vector<float> StageModel::read(int vs, Buffer which) const {
  const VStage& s = stage(vs);
  std::vector<float> host(s.n_params);
  backend_->download(host.data(), buffer_of(s.params, s.grads, s.adam_m, s.adam_v, which), s.n_params * sizeof(float));
  return host;
}

void StageModel::write(int vs, Buffer which, const std::vector<float>& values) {
  VStage& s = stage(vs);
  if (values.size() != s.n_params) throw Error("model: write of a buffer with the wrong size");
  backend_->upload(buffer_of(s.params, s.grads, s.adam_m, s.adam_v, which), values.data(), s.n_params * sizeof(float));
}

std::vector<float> StageModel::read_tensor(int vs, Buffer which, const std::string& name) const {
  const VStage& s = stage(vs);
  for (const auto& t : s.tensors) {
    if (t.name == name) {
      std::vector<float> host(t.numel);
      backend_->download(host.data(), buffer_of(s.params, s.grads, s.adam_m, s.adam_v, which) + t.offset,
                         t.numel * sizeof(float));
      return host;
    }
  }
  throw Error("model: virtual stage " + std::to_string(vs) + " has no tensor " + name);
}

std::vector<float> StageModel::logits(int mb) const {
  const VStage& s = stage(num_vs_ - 1);
  if (mb < 0 || mb >= microbatches_ || s.phase[mb] != 1) {
    throw Error("model: logits of microbatch " + std::to_string(mb) +
                " are only available between its forward and "
                "its backward_input");
  }
  std::vector<float> host(static_cast<std::size_t>(dims_.BT()) * dims_.V);
  backend_->download(host.data(), s.active[mb]->logits, host.size() * sizeof(float));
  return host;
}

// ------------------------------------------------------------------------------------------------ reference
std::vector<double> train_reference(const config::Deck& deck, int until_step) {
  const int S = deck.parallel.pipeline * deck.parallel.virtual_chunks;
  std::vector<int> all(S);
  for (int i = 0; i < S; i++) all[i] = i;
  StageModel model(deck, all, S);
  int step = 0;
  if (!deck.checkpoint.resume.empty()) step = model.load_checkpoint(deck.checkpoint.resume);
  const int last = until_step < 0 ? deck.run.steps : until_step;
  const std::size_t n = model.activation_elements();
  std::vector<std::vector<float>> act(S + 1, std::vector<float>(n)), grad(S + 1, std::vector<float>(n));
  std::vector<double> losses;
  for (; step < last; step++) {
    model.begin_step(step);
    for (int mb = 0; mb < model.num_microbatches(); mb++) {
      for (int vs = 0; vs < S; vs++) {
        model.forward(vs, mb, vs == 0 ? nullptr : act[vs].data(), vs == S - 1 ? nullptr : act[vs + 1].data());
      }
      for (int vs = S - 1; vs >= 0; vs--) {
        model.backward_full(vs, mb, vs == S - 1 ? nullptr : grad[vs + 1].data(), vs == 0 ? nullptr : grad[vs].data());
      }
    }
    model.optimizer_step(std::sqrt(model.local_grad_sq_norm()), step);
    losses.push_back(model.step_loss());
    const int done = step + 1;
    if (!deck.checkpoint.path.empty() &&
        ((deck.checkpoint.every > 0 && done % deck.checkpoint.every == 0) || done == last)) {
      model.save_checkpoint(deck.checkpoint.path, done);
    }
  }
  return losses;
}

}  // namespace conductor::model
