#pragma once
// Softmax cross-entropy over the vocabulary. Conventions: matmul.hpp.
namespace conductor::model {

class Backend;

// losses = -log softmax(logits)[targets]
// losses: (B,T), probs: (B,T,V), logits: (B,T,V), targets: (B,T)
void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T, int V,
                          Backend& be);
// dlogits = dloss * (probs - onehot(targets)), dloss = d(loss)/d(each token's loss); dlogits may alias probs
// dlogits: (B,T,V), probs: (B,T,V), targets: (B,T)
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int B, int T, int V,
                           Backend& be);

// The loss vocabulary-parallel, as Megatron computes it (computation migration's LM-head vocabulary groups,
// stage_vocab.cpp): G groups of columns, group g holding vocabulary ids [g V/G, (g+1) V/G), each group's logits a
// compact (B,T,nv) block. Within a group a token's max and sum run in column order, and the groups combine in index
// order, so the result does not depend on which rank computed which group.
// Per token of one group (first vocabulary id v0): its max logit, the sum of exp(logit - max), and the target's
// logit where the group holds the target, else 0.
// mx, sum, target_logit: (B,T), logits: (B,T,nv), targets: (B,T)
void vocab_stats_forward(float* mx, float* sum, float* target_logit, const float* logits, const int* targets, int v0,
                         int B, int T, int nv, Backend& be);
// The G groups' statistics combined in group order: M = max of the maxes, S = sum of sum_g exp(max_g - M), loss =
// M + log S - target logit (from the group holding the target).
// losses, M, S: (B,T), stats: (G, 3, B,T) (each group's mx, sum, target_logit), targets: (B,T)
void vocab_loss_forward(float* losses, float* M, float* S, const float* stats, const int* targets, int G, int V, int B,
                        int T, Backend& be);
// One group's logit gradients with the whole vocabulary's M and S: dloss (exp(logit - M) / S - onehot(target)).
// dlogits: (B,T,nv), logits: (B,T,nv), targets, M, S: (B,T)
void vocab_dlogits_backward(float* dlogits, const float* logits, const int* targets, const float* M, const float* S,
                            float dloss, int v0, int B, int T, int nv, Backend& be);

}  // namespace conductor::model
