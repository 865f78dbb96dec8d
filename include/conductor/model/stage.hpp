#pragma once
// The trainer a pipeline rank runs: the virtual stages it holds, each with its layers, parameters, gradients,
// AdamW state and one set of activation buffers per in-flight microbatch.
//
// The model is split over S = parallel.pipeline x parallel.virtual virtual stages (layer_split.hpp). Virtual
// stage 0 also holds the embeddings, virtual stage S-1 the final LayerNorm, the LM head and the loss. Per
// (virtual stage, microbatch) the runtime calls
//   forward -> backward_input (B) -> backward_weight (W)        or  forward -> backward_full (= B then W)
// Microbatches may be processed in any order and interleaved freely (F of mb 3 before F of mb 1, W long after
// B): each in-flight microbatch owns its buffers, taken at F and given back after W.
//
// Loss = mean over the step's microbatches of each microbatch's mean token loss; gradients are the gradient of
// that loss. Each W computes its microbatch's share into a slot of its own and the shares are added in
// microbatch order (a reorder buffer), so the gradients are bit-identical whatever order W ran in: every
// schedule, execution mode and the single-process reference give the same bits. Cost per W: one zeroing and
// one addition of the stage's parameters (small next to W's 2*B*T*params flops); memory: one slot of the
// stage's parameter size per W that ran ahead of an earlier microbatch's W (plus one), kept across steps.
//
// Activation tensors passed between stages are [microbatch_size, seq_len, d_model] floats in the backend's
// memory space (host memory for the cpu backend). Calls on one StageModel must not run concurrently.
//
// Sources: stage.cpp (parameters, buffers, access), stage_passes.cpp (F, B, W, losses), optimizer.cpp (the
// gradient norm and the AdamW step), checkpoint.cpp; the single-process reference trainer is reference.hpp.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conductor/model/backend.hpp"
#include "conductor/model/block.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/data.hpp"
#include "conductor/plan/plan.hpp"

namespace conductor::model {

struct TensorInfo {
  std::string name;  // "wte", "layer3.qkv_w", "lnf_w", ... (layer index is global)
  std::vector<int> shape;
  std::size_t offset = 0;  // floats from the start of the stage's parameter buffer
  std::size_t numel = 0;
  bool decay = false;  // weight decay applies (matrices and embeddings)
};

enum class Buffer { Params, Grads, AdamM, AdamV };

struct GroupedPass;  // one grouped unit's F or B, described group by group (stage_migration.cpp)
struct WeightPass;   // ... and its W

// The tensors of virtual stage `vs` of `num_virtual_stages` for the plan's model, in buffer order: what its
// checkpoint file holds (check_checkpoint_fits compares them without building the model).
std::vector<TensorInfo> virtual_stage_tensors(const plan::Plan& plan, int num_virtual_stages, int vs);

class StageModel {
 public:
  // backend: nullptr = the plan's `backend` when it names a math backend, else cpu.
  StageModel(const plan::Plan& plan, std::vector<int> virtual_stages_held, int num_virtual_stages,
             Backend* backend = nullptr);
  ~StageModel();
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  // ---- shapes ----
  int num_virtual_stages() const { return num_vs_; }
  const std::vector<int>& virtual_stages_held() const { return held_; }
  bool holds(int vs) const;
  int num_microbatches() const { return microbatches_; }
  int first_layer(int vs) const;  // global index of the first layer of vs
  int num_layers(int vs) const;
  // Elements of an activation tensor exchanged between stages: microbatch_size * seq_len * d_model floats.
  std::size_t activation_elements() const { return static_cast<std::size_t>(dims_.BT()) * dims_.C; }
  // Bytes one in-flight microbatch of vs holds from its F until its W (activations kept for B and W plus the
  // gradients B keeps for W). The no-argument form is the largest over the held virtual stages.
  std::size_t activation_bytes_per_microbatch(int vs) const;
  std::size_t activation_bytes_per_microbatch() const;
  std::size_t parameter_count(int vs) const;

  // ---- one training step ----
  // Zeroes the gradients and the step's losses and sets the data step. No microbatch may be in flight.
  void begin_step(int step);
  // in: [B,T,C] output of virtual stage vs-1 (nullptr on virtual stage 0, which embeds its own tokens).
  // out: [B,T,C] for virtual stage vs+1 (nullptr on the last virtual stage, which computes the loss).
  void forward(int vs, int mb, const float* in, float* out);
  // B: grad_out [B,T,C] from vs+1 (nullptr on the last virtual stage); grad_in [B,T,C] for vs-1 (nullptr on
  // virtual stage 0). Keeps what W needs.
  void backward_input(int vs, int mb, const float* grad_out, float* grad_in);
  // W: accumulates the weight gradients of microbatch mb and frees its buffers.
  void backward_weight(int vs, int mb);
  void backward_full(int vs, int mb, const float* grad_out, float* grad_in);
  // Forward only on validation batch `batch` (DataSource::valid_microbatch), between steps (no microbatch in
  // flight; uses and gives back microbatch 0's buffers). in / out as forward. Returns the batch's mean token loss
  // on the last virtual stage, NaN elsewhere. The same math as forward, so the loss does not depend on the split
  // over ranks.
  double eval_forward(int vs, int batch, const float* in, float* out);
  // Mean token loss of microbatch mb of the current step (last virtual stage only, after its forward).
  double loss(int mb) const;
  // Mean of loss(mb) over all microbatches (all forwards of the step done on the last virtual stage).
  double step_loss() const;
  // Sum of squared gradients over the held virtual stages (double, fixed order). The runtime sums it over all
  // ranks and passes sqrt of the total to optimizer_step.
  double local_grad_sq_norm() const;
  // The sum of squares of each gradient tensor, [virtual stage][tensor in tensors(vs) order]; rows of stages not
  // held are empty. local_grad_sq_norm() is the sequential sum of these in that order, so a runtime that
  // gathers every rank's rows and sums them the same way gets the single-process bits.
  std::vector<std::vector<double>> grad_sq_norms() const;
  // AdamW with gradient scale clip_scale(global_grad_norm) and learning_rate(step) (optimizer.hpp).
  void optimizer_step(double global_grad_norm, int step);
  // Optimizer post-validation (runtime/training.cpp): the update with gradient scale 1, taken before the global
  // norm is known; equal bit for bit to optimizer_step when clipping_applies() is false for that norm.
  void optimizer_step_unclipped(int step);
  // Copies the weights, AdamW moments and gradients of the held stages into a backup (allocated on first use, kept
  // for the run); returns the backup's bytes. restore_backup() puts them back (undoes an optimistic update, and
  // brings back the step's gradients for its redo after the next step's attempt has overwritten them).
  std::size_t keep_backup();
  void restore_backup();
  // Microbatches of vs taken by F and not yet released by W.
  int in_flight(int vs) const;

  // ---- computation migration: MLP column groups and attention head groups (docs/migration.md, "Real slices on
  // the cpu backend") ----
  // With migration on (plan.migration.enabled and unit `mlp`), F, B and W compute every layer's MLP in
  // G = migration.slices column groups, group g holding columns [g F/G, (g+1) F/G), each from compact copies of
  // its columns, which is how a helper rank computes them: the bits do not depend on where a group ran. (Without
  // migration the MLP is one product in F, B and W, as before.) 1 = not grouped.
  int mlp_groups() const { return mlp_groups_; }
  // The same for the attention with unit `heads`: head group g holds heads [g NH/G, (g+1) NH/G) (their QKV
  // columns, attention core and output-projection rows). 1 = not grouped.
  int head_groups() const { return head_groups_; }
  // Owner, between B and W of (vs, mb): what a helper needs for the last `groups` groups of every grouped unit,
  // per layer: (MLP) the LN2 output and the MLP's output gradient [B,T,C], then per group its GELU output and
  // pre-activation gradient [B,T,nc]; (heads) the LN1 output and the attention output's gradient [B,T,C], then per
  // group its QKV gradient [B,T,3 ng HS] and attention output [B,T,ng HS]. The next W of (vs, mb) leaves those
  // groups out and holds the microbatch's gradients back until land_weight_grads.
  std::vector<float> weight_inputs(int vs, int mb, int groups);
  // Floats of the helper's answer for the last `groups` groups of vs (weight_grads' layout).
  std::size_t weight_grads_floats(int vs, int groups) const;
  // Helper (any rank, the same model dimensions and groups): the weight gradients of the last `groups` groups from
  // `inputs` (weight_inputs' layout), per layer: (MLP) per group fc_w [nc,C], fc_b [nc], fcproj_w [nc,C], and
  // fcproj_b [C] for the group at column 0; (heads) per group qkv_w [3 ng HS, C], qkv_b [3 ng HS], proj_w
  // [ng HS, C], and proj_b [C] for the group at head 0.
  std::vector<float> weight_grads(int groups, const std::vector<float>& inputs) const;
  // Owner: the helper's answer lands in the held-back gradients of (vs, mb), which then join the microbatch-order
  // sum.
  void land_weight_grads(int vs, int mb, const std::vector<float>& grads);
  // F and B in groups (the same conditions): every F and B computes each layer's MLP (mlp_groups() > 1) and / or
  // attention (head_groups() > 1) group by group from compact copies, and adds the groups' partial outputs (F) or
  // input-gradient partials (B) in one fixed order, from the last group down to group 0 (acc = p[G-1], then
  // acc = p[g] + acc), so that a helper holding the last groups answers with one partial sum and the bits do not
  // depend on where a group ran.
  //
  // Owner: the next forward or backward_input gives the last `groups` groups of every grouped unit of every layer to
  // a helper. Per layer and unit (F: attention, then MLP; B: MLP, then attention) it calls exchange.send(request,
  // floats of the answer) once the input exists, computes its own groups, then takes exchange.receive() (blocking)
  // and goes on. A request is the unit's input followed by one float naming the unit (0 MLP, 1 heads). Layouts
  // (nc a group's MLP columns, ny = ng HS its heads' width):
  //   MLP F in:    LN2 output [B,T,C]; per group fc_w [nc,C], fc_b [nc], fcproj_w [nc,C] (fcproj_b [C]: group 0)
  //   MLP F out:   partial sum [B,T,C]; per group its pre-activation [B,T,nc] (kept for B and W; the owner
  //                recomputes the GELU output from it)
  //   MLP B in:    MLP output gradient [B,T,C]; per group fcproj_w [nc,C], fc_w [nc,C], pre-activation [B,T,nc]
  //   MLP B out:   partial sum of the LN2 output gradient [B,T,C]; per group its pre-activation gradient [B,T,nc]
  //   heads F in:  LN1 output [B,T,C]; per group qkv_w [3ny,C], qkv_b [3ny], proj_w [ny,C] (proj_b [C]: group 0)
  //   heads F out: partial sum [B,T,C]; per group its QKV [B,T,3ny], attention output [B,T,ny], log-sum-exp [B,ng,T]
  //   heads B in:  attention output gradient [B,T,C]; per group proj_w [ny,C], qkv_w [3ny,C] and its F stash
  //   heads B out: partial sum of the LN1 output gradient [B,T,C]; per group its QKV gradient [B,T,3ny]
  struct GroupExchange {
    std::function<void(std::vector<float> request, std::size_t answer_floats)> send;
    std::function<std::vector<float>()> receive;
  };
  void give_groups(int groups, GroupExchange exchange);
  // Helper (any rank, the same model dimensions and groups): one request's answer to F / B for the last `groups`
  // groups of the unit it names.
  std::vector<float> forward_help(int groups, const std::vector<float>& request) const;
  std::vector<float> backward_input_help(int groups, const std::vector<float>& request) const;

  // ---- computation migration: LM-head vocabulary groups (unit vocab; stage_vocab.cpp) ----
  // With migration on and unit `vocab`, the last virtual stage computes the LM head and the loss in G =
  // migration.slices vocabulary groups (group g: LM-head rows [g V/G, (g+1) V/G)), the loss vocabulary-parallel:
  // per group and token the max logit, the sum of exponentials relative to it and the target's logit; the groups are
  // combined in index order. B adds the groups' parts of the hidden state's gradient from the last group down. Any
  // backend (the loss's kernels are crossentropy.hpp's vocab_*). 1 = not grouped. give_groups gives the last k
  // vocabulary groups too (one request after the layers'):
  //   vocab F in:  final LayerNorm output [B,T,C], targets [B,T] (as floats), the groups' LM-head rows [V_k, C]
  //   vocab F out: per group its max, sum of exponentials and target logit (0 where it lacks the target), [B,T] each
  //   vocab B in:  as F's, with the whole vocabulary's per-token max and sum [B,T] each after the targets
  //   vocab B out: the partial sum of the groups' final-LayerNorm-output gradients [B,T,C]
  // W: weight_inputs appends the LM head's part, B's layout (ending in the unit float 2; from a stage without the LM
  // head the one float 3), and weight_grads answers after the layers' gradients with the groups' LM-head weight
  // gradients [V_k, C] (the helper recomputes their logits and logit gradients).
  int vocab_groups() const { return vocab_groups_; }

  // ---- checkpoint files (HDF5, one per virtual stage: <step folder>/vstage_<vs>.h5; model/checkpoint.hpp) ----
  // Writes weights, AdamW moments, steps_done, the data RNG state and the resolved deck of each held stage
  // into the existing folder `dir`, durably (fsync); returns each file's name, CRC-32 and size for the
  // manifest. Throws Error naming the file and the system's reason (e.g. no space left).
  std::vector<CheckpointFile> save_checkpoint(const std::string& dir, int steps_done) const;
  // Restores the held stages from the step folder `dir` after checking each file against its manifest (size,
  // CRC-32, step); returns steps_done. Throws InputError naming the file and what is wrong: missing manifest,
  // changed bytes, a file from another step, another model shape or split.
  int load_checkpoint(const std::string& dir);
  static std::string checkpoint_file(const std::string& dir, int vs);

  // ---- access for tests, the oracle and migration ----
  const std::vector<TensorInfo>& tensors(int vs) const;
  std::vector<float> read(int vs, Buffer which) const;
  void write(int vs, Buffer which, const std::vector<float>& values);
  std::vector<float> read_tensor(int vs, Buffer which, const std::string& name) const;
  // Logits [B,T,V] of microbatch mb (last virtual stage, between its forward and its backward_input). With
  // vocabulary groups, group by group ([B,T,nv] each), and only the groups F computed on this rank.
  std::vector<float> logits(int mb) const;
  const Dims& dims() const { return dims_; }
  Backend& backend() const { return *backend_; }
  const DataSource& data() const { return data_; }

  // Internals, defined in src/model/stage_internal.hpp: one held virtual stage, one in-flight microbatch.
  struct VStage;
  struct Micro;

 private:
  // Where a microbatch of a virtual stage is between its F and its W.
  enum class Phase { idle, after_forward, after_backward_input };

  VStage& stage(int vs);
  const VStage& stage(int vs) const;
  void adamw_all(float grad_scale, int step);
  void allocate_step_buffers();
  std::unique_ptr<VStage> make_stage(int vs, const std::vector<int>& split) const;
  Micro& micro(VStage& s, int mb, Phase expected, const char* op);
  void layout_micro(const VStage& s, Micro* m, float* base, int* ibase, std::size_t& nfloats, std::size_t& nints) const;
  void check_forward_args(const VStage& s, const float* in, const float* out) const;
  void run_forward(VStage& s, Micro& m, int* tokens, int* targets, const float* in, float* out);
  void head_forward(VStage& s, Micro& m);
  void head_backward_input(VStage& s, Micro& m);
  std::vector<unsigned char> checkpoint_image(int vs, int steps_done, const std::string& file) const;
  void load_stage(int vs, long long file_id, const std::string& file, int manifest_step);  // file_id: an hid_t

  plan::Plan plan_;
  std::unique_ptr<Backend> owned_backend_;
  Backend* backend_ = nullptr;
  std::vector<int> held_;
  int num_vs_ = 1;
  int microbatches_ = 1;
  Dims dims_;
  DataSource data_;
  int step_ = 0;
  void fetch_losses() const;                 // reads the pending microbatch losses from the backend (host-blocking)
  mutable std::vector<double> losses_;       // per microbatch, NaN until its forward on the last stage
  mutable std::vector<char> loss_pending_;   // forward done, loss not yet read from the backend
  DeviceBuffer step_token_losses_;           // [M, B*T] token losses of the step (last stage only)
  void upload_step_tokens();                 // the step's token ids, once per step (embedding / head stages)
  DeviceBuffer step_tokens_, step_targets_;  // [M,B,T] int token ids and next-token targets of the step
  int tokens_step_ = -1;                     // the step step_tokens_ holds
  DeviceBuffer eval_tokens_, eval_targets_;  // [B,T] of the validation batch eval_forward runs
  std::vector<std::unique_ptr<VStage>> stages_;
  std::vector<DeviceBuffer> backup_;  // keep_backup(): per held stage, weights | AdamW m | AdamW v | gradients
  std::map<int, int> index_;          // vs -> position in stages_
  DeviceBuffer scratch_dy_, scratch_delta_;
  std::vector<int> host_inputs_, host_targets_;
  int mlp_groups_ = 1;                  // see mlp_groups()
  DeviceBuffer group_gelu_, group_dh_;  // compact columns of one MLP group (W with groups)
  int group_begin(int g) const { return static_cast<int>(static_cast<long>(g) * dims_.F / mlp_groups_); }
  void mlp_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here);
  int head_groups_ = 1;                // see head_groups()
  DeviceBuffer group_dqkv_, group_y_;  // compact QKV gradient and attention output of one head group
  int head_begin(int g) const { return static_cast<int>(static_cast<long>(g) * dims_.NH / head_groups_); }
  void head_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here);
  std::size_t weight_in_layer(int groups) const;   // weight_inputs' floats per layer
  std::size_t weight_out_layer(int groups) const;  // weight_grads' floats per layer
  int give_groups_ = 0;                            // groups the next forward / backward_input gives away (give_groups)
  GroupExchange exchange_;                         // ... and how
  DeviceBuffer group_h_;                           // compact pre-activation of one group (F and B with groups)
  DeviceBuffer group_parts_;  // [G, B,T,C] the groups' partial outputs / input gradients of one layer
  DeviceBuffer group_qkv_, group_lse_, group_dy_, group_delta_;  // one head group's F stash and B scratch
  void check_groups(int groups, const char* what) const;
  void layer_forward_grouped(const LayerActs& a, const LayerView& w);
  void layer_backward_input_grouped(const LayerActs& a, const LayerView& w);
  // F and B of a grouped unit: one skeleton over the unit's description (stage_migration.cpp).
  GroupedPass mlp_pass(bool forward) const;
  GroupedPass heads_pass(bool forward) const;
  GroupedPass grouped_pass(float unit, bool forward) const;  // the unit a request names
  void run_grouped(const GroupedPass& u, const LayerActs& a, const LayerView& w);
  std::vector<float> help_grouped(const GroupedPass& u, int groups, std::span<const float> request) const;
  WeightPass mlp_weight_pass() const;
  WeightPass heads_weight_pass() const;
  std::vector<WeightPass> weight_passes() const;  // the grouped units' W, in the order of a W request
  void weight_groups(const WeightPass& u, const LayerActs& a, const LayerView& g, int groups_here);
  void add_slots_in_order(VStage& s);
  int vocab_groups_ = 1;      // see vocab_groups()
  DeviceBuffer vocab_parts_;  // [G, B,T,C] the vocabulary groups' parts of the hidden state's gradient (B)
  DeviceBuffer vocab_stats_;  // [G, 3, B,T] the groups' max, sum of exponentials and target logit (F)
  int vocab_begin(int g) const { return static_cast<int>(static_cast<long>(g) * dims_.V / vocab_groups_); }
  void check_vocab_groups() const;
  std::vector<float> vocab_request(const VStage& s, const Micro& m, int first, bool backward) const;
  std::size_t vocab_request_floats(int groups, bool backward) const;
  void head_forward_vocab(VStage& s, Micro& m);
  void head_backward_input_vocab(VStage& s, Micro& m);
  void vocab_group_dlogits(const VStage& s, Micro& m, int k, float dloss);
  void head_backward_weight_vocab(const VStage& s, Micro& m, float* grads, int groups_here);
  void append_vocab_weight_inputs(const VStage& s, const Micro& m, int groups, std::vector<float>& out) const;
  std::size_t vocab_grads_floats(const VStage& s, int groups) const;
  const float* land_vocab_weight_grads(const VStage& s, float* slot, int groups, const float* at);
  std::vector<float> layer_weight_grads(int groups, std::span<const float> inputs) const;  // weight_grads' layers
  bool is_vocab_request(const std::vector<float>& request) const;
  std::vector<float> vocab_forward_help(int groups, std::span<const float> input) const;
  std::vector<float> vocab_backward_input_help(int groups, std::span<const float> input) const;
};

}  // namespace conductor::model
