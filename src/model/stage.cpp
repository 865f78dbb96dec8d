// StageModel's parameters and buffers: the tensors of each held virtual stage, their initialisation, the
// per-microbatch buffer layout, and access for tests and checkpoints. The passes are in stage_passes.cpp, the
// optimizer step in optimizer.cpp.
#include "conductor/model/stage.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "conductor/model/layer_split.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"

namespace conductor::model {

namespace {

Dims dims_of(const plan::Plan& plan) {
  const auto& m = plan.model;
  if (m.d_model % m.n_heads != 0) {
    throw InputError("model.n_heads = " + std::to_string(m.n_heads) +
                     " does not divide model.d_model = " + std::to_string(m.d_model));
  }
  return Dims{plan.pipeline.microbatch_size, m.seq_len, m.d_model, m.n_heads, m.d_model / m.n_heads,
              m.d_model * m.mlp_ratio,       m.vocab};
}

// The tensors of a virtual stage in buffer order, each 64-byte aligned.
class TensorList {
 public:
  void add(const std::string& name, std::vector<int> shape, bool decay) {
    TensorInfo t;
    t.name = name;
    t.numel = 1;
    for (int x : shape) t.numel *= static_cast<std::size_t>(x);
    t.shape = std::move(shape);
    t.offset = floats_;
    t.decay = decay;
    floats_ += (t.numel + 15) / 16 * 16;
    tensors_.push_back(std::move(t));
  }
  std::vector<TensorInfo>& tensors() { return tensors_; }
  std::size_t floats() const { return floats_; }

 private:
  std::vector<TensorInfo> tensors_;
  std::size_t floats_ = 0;
};

std::string layer_prefix(int global_layer) { return "layer" + std::to_string(global_layer) + "."; }

void add_layer_tensors(TensorList& list, const Dims& d, int global_layer) {
  const std::string p = layer_prefix(global_layer);
  const int C = d.C, F = d.F;
  list.add(p + "ln1_w", {C}, false);
  list.add(p + "ln1_b", {C}, false);
  list.add(p + "qkv_w", {d.NH, 3, d.HS, C}, true);
  list.add(p + "qkv_b", {d.NH, 3, d.HS}, false);
  list.add(p + "proj_w", {C, C}, true);
  list.add(p + "proj_b", {C}, false);
  list.add(p + "ln2_w", {C}, false);
  list.add(p + "ln2_b", {C}, false);
  list.add(p + "fc_w", {F, C}, true);
  list.add(p + "fc_b", {F}, false);
  list.add(p + "fcproj_w", {F, C}, true);
  list.add(p + "fcproj_b", {C}, false);
}

TensorList stage_tensors(const Dims& d, int first_layer, int n_layers, bool embedding, bool head) {
  TensorList list;
  if (embedding) {
    list.add("wte", {d.V, d.C}, true);
    list.add("wpe", {d.T, d.C}, true);
  }
  for (int l = 0; l < n_layers; l++) add_layer_tensors(list, d, first_layer + l);
  if (head) {
    list.add("lnf_w", {d.C}, false);
    list.add("lnf_b", {d.C}, false);
    list.add("lm_head_w", {d.V, d.C}, true);
  }
  return list;
}

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

// Initialisation (GPT-2): N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layers), LN = (1, 0).
std::vector<float> initial_parameters(const std::vector<TensorInfo>& tensors, std::size_t n_params,
                                      const plan::Plan& plan) {
  const float proj_std = 0.02f / std::sqrt(2.0f * plan.model.n_layers);
  std::vector<float> host(n_params, 0.0f);
  for (const auto& t : tensors) {
    const std::string kind = t.name.substr(t.name.find('.') + 1);
    float std = 0.0f, constant = 0.0f;
    if (kind == "ln1_w" || kind == "ln2_w" || kind == "lnf_w")
      constant = 1.0f;
    else if (kind == "proj_w" || kind == "fcproj_w")
      std = proj_std;
    else if (t.decay)
      std = 0.02f;
    init_tensor(host, t, plan.model.init_seed, std, constant);
  }
  return host;
}

LayerView layer_view(const StageModel::VStage& s, float* base, int global_layer) {
  const std::string p = layer_prefix(global_layer);
  LayerView v;
  v.ln1_w = base + s.offset(p + "ln1_w");
  v.ln1_b = base + s.offset(p + "ln1_b");
  v.qkv_w = base + s.offset(p + "qkv_w");
  v.qkv_b = base + s.offset(p + "qkv_b");
  v.proj_w = base + s.offset(p + "proj_w");
  v.proj_b = base + s.offset(p + "proj_b");
  v.ln2_w = base + s.offset(p + "ln2_w");
  v.ln2_b = base + s.offset(p + "ln2_b");
  v.fc_w = base + s.offset(p + "fc_w");
  v.fc_b = base + s.offset(p + "fc_b");
  v.fcproj_w = base + s.offset(p + "fcproj_w");
  v.fcproj_b = base + s.offset(p + "fcproj_b");
  return v;
}

// Carves consecutive 64-byte aligned tensors out of one allocation; with a null base it only counts.
template <class T>
class Carver {
 public:
  explicit Carver(T* base) : base_(base) {}
  T* take(std::size_t n) {
    T* p = base_ ? base_ + used_ : nullptr;
    used_ += (n + 15) / 16 * 16;
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  T* base_;
  std::size_t used_ = 0;
};

// One layer's activations and the gradients B keeps for W, between the residual stream entries l and l+1.
// dy and delta are B's scratch, shared by every layer and microbatch.
void layout_layer(LayerActs& a, const std::vector<float*>& res, const std::vector<float*>& dres, int l,
                  Carver<float>& f, const Dims& d, float* scratch_dy, float* scratch_delta) {
  const std::size_t BT = d.BT(), btc = BT * d.C;
  a.x = res[l];
  a.out = res[l + 1];
  a.dx = dres[l];
  a.dout = dres[l + 1];
  a.ln1 = f.take(btc);
  a.mean1 = f.take(BT);
  a.rstd1 = f.take(BT);
  a.x2 = f.take(btc);
  a.ln2 = f.take(btc);
  a.mean2 = f.take(BT);
  a.rstd2 = f.take(BT);
  a.attn.qkv = f.take(3 * btc);
  a.attn.lse = f.take(static_cast<std::size_t>(d.B) * d.NH * d.T);
  a.attn.y = f.take(btc);
  a.attn.dqkv = f.take(3 * btc);
  a.attn.dy = scratch_dy;
  a.attn.delta = scratch_delta;
  a.mlp.h = f.take(BT * d.F);
  a.mlp.gelu = f.take(BT * d.F);
  a.mlp.dh = f.take(BT * d.F);
  a.dx2 = f.take(btc);
  a.dln1 = f.take(btc);
  a.dln2 = f.take(btc);
}

}  // namespace

std::vector<TensorInfo> virtual_stage_tensors(const plan::Plan& plan, int num_virtual_stages, int vs) {
  const std::vector<int> split = split_layers(plan.model, num_virtual_stages);
  TensorList list =
      stage_tensors(dims_of(plan), first_layer(split, vs), split[vs], vs == 0, vs == num_virtual_stages - 1);
  return std::move(list.tensors());
}

StageModel::StageModel(const plan::Plan& plan, std::vector<int> virtual_stages_held, int num_virtual_stages,
                       Backend* backend)
    : plan_(plan),
      held_(std::move(virtual_stages_held)),
      num_vs_(num_virtual_stages),
      microbatches_(plan.pipeline.m),
      data_(plan) {
  if (backend) {
    backend_ = backend;
  } else {
    owned_backend_ = make_backend(plan.backend == "emulated" ? "cpu" : plan.backend);
    backend_ = owned_backend_.get();
  }
  dims_ = dims_of(plan);
  if (held_.empty()) throw InputError("model: a stage model must hold at least one virtual stage");
  const std::vector<int> split = split_layers(plan.model, num_vs_);
  losses_.assign(microbatches_, std::numeric_limits<double>::quiet_NaN());
  loss_pending_.assign(microbatches_, 0);
  allocate_step_buffers();
  vocab_groups_ = std::max(1, plan.migration.vocab_groups);  // stage_vocab.cpp; before the stages' layouts
  check_vocab_groups();
  for (int vs : held_) {
    if (vs < 0 || vs >= num_vs_) {
      throw InputError("model: virtual stage " + std::to_string(vs) + " is outside 0.." + std::to_string(num_vs_ - 1));
    }
    if (index_.count(vs)) throw InputError("model: virtual stage " + std::to_string(vs) + " listed twice");
    index_[vs] = static_cast<int>(stages_.size());
    stages_.push_back(make_stage(vs, split));
  }
  const Dims& d = dims_;
  scratch_dy_ = DeviceBuffer(*backend_, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float));
  scratch_delta_ = DeviceBuffer(*backend_, static_cast<std::size_t>(d.B) * d.NH * d.T * sizeof(float));
  mlp_groups_ = std::max(1, plan.migration.mlp_groups);
  if (mlp_groups_ > 1) {
    const std::size_t group = static_cast<std::size_t>(d.BT()) * ((d.F + mlp_groups_ - 1) / mlp_groups_ + 1);
    group_gelu_ = DeviceBuffer(*backend_, group * sizeof(float));
    group_dh_ = DeviceBuffer(*backend_, group * sizeof(float));
    group_h_ = DeviceBuffer(*backend_, group * sizeof(float));
  }
  head_groups_ = std::max(1, plan.migration.head_groups);
  if (head_groups_ > 1) {
    const int ng = (d.NH + head_groups_ - 1) / head_groups_;
    const std::size_t ny = static_cast<std::size_t>(d.BT()) * ng * d.HS, lse = static_cast<std::size_t>(d.B) * ng * d.T;
    group_qkv_ = DeviceBuffer(*backend_, 3 * ny * sizeof(float));
    group_dqkv_ = DeviceBuffer(*backend_, 3 * ny * sizeof(float));
    group_y_ = DeviceBuffer(*backend_, ny * sizeof(float));
    group_dy_ = DeviceBuffer(*backend_, ny * sizeof(float));
    group_lse_ = DeviceBuffer(*backend_, lse * sizeof(float));
    group_delta_ = DeviceBuffer(*backend_, lse * sizeof(float));
  }
  if (vocab_groups_ > 1) {
    vocab_parts_ = DeviceBuffer(*backend_, static_cast<std::size_t>(vocab_groups_) * d.BT() * d.C * sizeof(float));
    vocab_stats_ = DeviceBuffer(*backend_, 3 * static_cast<std::size_t>(vocab_groups_) * d.BT() * sizeof(float));
  }
  if (const int most = std::max(mlp_groups_, head_groups_); most > 1) {
    group_parts_ = DeviceBuffer(*backend_, static_cast<std::size_t>(most) * d.BT() * d.C * sizeof(float));
  }
}

StageModel::~StageModel() = default;

// The step's token ids (embedding and head stages) and token losses (head stage), all microbatches at once.
void StageModel::allocate_step_buffers() {
  const bool embeds = std::find(held_.begin(), held_.end(), 0) != held_.end();
  const bool heads = std::find(held_.begin(), held_.end(), num_vs_ - 1) != held_.end();
  const std::size_t tokens = static_cast<std::size_t>(microbatches_) * dims_.BT();
  if (embeds || heads) {
    step_tokens_ = DeviceBuffer(*backend_, tokens * sizeof(int));
    step_targets_ = DeviceBuffer(*backend_, tokens * sizeof(int));
  }
  if (heads) step_token_losses_ = DeviceBuffer(*backend_, tokens * sizeof(float));
}

// Virtual stage vs: its tensors, initial parameters, zeroed gradients and AdamW moments, and per-layer views.
std::unique_ptr<StageModel::VStage> StageModel::make_stage(int vs, const std::vector<int>& split) const {
  auto s = std::make_unique<VStage>();
  s->vs = vs;
  s->first_layer = model::first_layer(split, vs);
  s->n_layers = split[vs];
  s->embedding = vs == 0;
  s->head = vs == num_vs_ - 1;
  TensorList list = stage_tensors(dims_, s->first_layer, s->n_layers, s->embedding, s->head);
  s->tensors = std::move(list.tensors());
  s->n_params = list.floats();
  const std::vector<float> host = initial_parameters(s->tensors, s->n_params, plan_);
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
    s->w.push_back(layer_view(*s, s->params.f(), s->first_layer + l));
    s->g.push_back(layer_view(*s, s->grads.f(), s->first_layer + l));
  }
  layout_micro(*s, nullptr, nullptr, nullptr, s->micro_floats, s->micro_ints);
  s->active.resize(microbatches_);
  s->phase.assign(microbatches_, Phase::idle);
  return s;
}

// Carves one microbatch's buffers out of two allocations (floats, ints). Called once with null bases to size
// them, then per new Micro with the real bases.
void StageModel::layout_micro(const VStage& s, Micro* m, float* base, int* ibase, std::size_t& nfloats,
                              std::size_t& nints) const {
  const Dims& d = dims_;
  const std::size_t BT = d.BT(), btc = BT * d.C;
  Carver<float> f(base);
  Carver<int> i(ibase);
  Micro sizing;
  Micro& out = m ? *m : sizing;
  const int L = s.n_layers;
  out.res.resize(L + 1);
  out.dres.resize(L + 1);
  for (auto& p : out.res) p = f.take(btc);
  for (auto& p : out.dres) p = f.take(btc);
  out.layers.assign(L, LayerActs{});
  for (int l = 0; l < L; l++) {
    layout_layer(out.layers[l], out.res, out.dres, l, f, d, scratch_dy_.f(), scratch_delta_.f());
  }
  if (s.embedding) out.tokens = i.take(BT);
  if (s.head) {
    out.targets = i.take(BT);
    out.lnf = f.take(btc);
    out.meanf = f.take(BT);
    out.rstdf = f.take(BT);
    out.logits = f.take(BT * d.V);
    out.probs = f.take(BT * d.V);
    out.losses = f.take(BT);
    out.dlnf = f.take(btc);
    if (vocab_groups_ > 1) {
      out.vocab_max = f.take(BT);
      out.vocab_sum = f.take(BT);
    }
  }
  nfloats = f.used();
  nints = i.used();
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
  return static_cast<int>(std::count_if(s.phase.begin(), s.phase.end(), [](Phase p) { return p != Phase::idle; }));
}

// Microbatch mb of s, which must be in phase `expected` for `op`; F (expected idle) takes buffers from the pool
// or allocates them.
StageModel::Micro& StageModel::micro(VStage& s, int mb, Phase expected, const char* op) {
  if (mb < 0 || mb >= microbatches_) {
    throw Error(std::string("model: ") + op + " of microbatch " + std::to_string(mb) + " outside 0.." +
                std::to_string(microbatches_ - 1));
  }
  if (s.phase[mb] != expected) {
    static const char* names[] = {"not started (or already finished)", "after its forward", "after its backward_input"};
    throw Error(std::string("model: ") + op + " of virtual stage " + std::to_string(s.vs) + " microbatch " +
                std::to_string(mb) + " but the microbatch is " + names[static_cast<int>(s.phase[mb])]);
  }
  if (expected != Phase::idle) return *s.active[mb];
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
  return *s.active[mb];
}

const std::vector<TensorInfo>& StageModel::tensors(int vs) const { return stage(vs).tensors; }

namespace {
float* buffer_of(const StageModel::VStage& s, Buffer which) {
  switch (which) {
    case Buffer::Params: return s.params.f();
    case Buffer::Grads: return s.grads.f();
    case Buffer::AdamM: return s.adam_m.f();
    case Buffer::AdamV: return s.adam_v.f();
  }
  return nullptr;
}
}  // namespace

std::vector<float> StageModel::read(int vs, Buffer which) const {
  const VStage& s = stage(vs);
  std::vector<float> host(s.n_params);
  backend_->download(host.data(), buffer_of(s, which), s.n_params * sizeof(float));
  return host;
}

void StageModel::write(int vs, Buffer which, const std::vector<float>& values) {
  VStage& s = stage(vs);
  if (values.size() != s.n_params) throw Error("model: write of a buffer with the wrong size");
  backend_->upload(buffer_of(s, which), values.data(), s.n_params * sizeof(float));
}

std::vector<float> StageModel::read_tensor(int vs, Buffer which, const std::string& name) const {
  const VStage& s = stage(vs);
  for (const auto& t : s.tensors) {
    if (t.name == name) {
      std::vector<float> host(t.numel);
      backend_->download(host.data(), buffer_of(s, which) + t.offset, t.numel * sizeof(float));
      return host;
    }
  }
  throw Error("model: virtual stage " + std::to_string(vs) + " has no tensor " + name);
}

std::vector<float> StageModel::logits(int mb) const {
  const VStage& s = stage(num_vs_ - 1);
  if (mb < 0 || mb >= microbatches_ || s.phase[mb] != Phase::after_forward) {
    throw Error("model: logits of microbatch " + std::to_string(mb) +
                " are only available between its forward and its backward_input");
  }
  std::vector<float> host(static_cast<std::size_t>(dims_.BT()) * dims_.V);
  backend_->download(host.data(), s.active[mb]->logits, host.size() * sizeof(float));
  return host;
}

}  // namespace conductor::model
