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

}  // namespace conductor::model
