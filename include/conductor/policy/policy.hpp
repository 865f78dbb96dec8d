#pragma once
// The learned policy at inference: the actor's weights as plain float arrays, scored by hand (a LibTorch call
// per decision costs tens of microseconds; a step of p=8, m=32 has ~800 decisions and a 2 ms budget). The
// LibTorch module that trains these weights lives in src/policy/nets.hpp; to_policy() copies it here.
//
// Actor: score(x) = w3 . relu(W2 relu(W1 x + b1) + b2) + b3 + skip . x, softmax over a decision's candidates.
// The linear skip term starts at -3 on the heuristic-rank feature, so an untrained policy IS the heuristic and
// PPO learns corrections to it (heuristic-guided, as the Conductor paper does).
//
// File format (save_policy / load_policy): one text line
//   conductor-policy feature_version=V features=F global=G hidden=H heuristic=bfw [deck_crc32=0x...]
//   body_bytes=N body_crc32=0x...\n   (one line)
// followed by a LibTorch archive (torch::serialize) of the actor and critic tensors (the body; its size and
// CRC-32 are checked before LibTorch reads it). deck_crc32 (train-policy's files have it; older files do not) is
// the CRC-32 of the deck the policy was trained on: resolved.yaml beside it without its leading comment lines, and
// with run.output "" and run.overwrite false (where the files went is no part of the training).
#include <string>
#include <vector>

#include "conductor/policy/env.hpp"
#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/planner.hpp"

namespace conductor::policy {

struct Policy {
  int hidden = 32;
  sched::Hint heuristic = sched::Hint::BFW;
  // Actor, row-major: w1 [hidden][kNumFeatures], w2 [hidden][hidden], w3 [hidden].
  std::vector<float> w1, b1, w2, b2, w3, skip;
  float b3 = 0.0f;
  // Critic (training only; kept in the file so training can be inspected): [hidden][kNumGlobal], ...
  std::vector<float> c1, cb1, c2, cb2, c3;
  float cb3 = 0.0f;
  // The training deck's CRC-32 ("0x1a2b3c4d", the header's deck_crc32); "" when unknown (a file written before it,
  // a policy trained outside train-policy).
  std::string deck_crc32;

  // Transposed copies of w1 and w2 ([in][out], so the per-candidate loops vectorize); prepare() builds them
  // (to_policy and load_policy call it).
  std::vector<float> w1t, w2t;
  void prepare();

  // The untrained, heuristic-equivalent actor with the given hidden width (weights from the seed).
  static Policy initial(int hidden, sched::Hint heuristic, unsigned long long seed);

  float score(const float* x) const;                 // one candidate's logit
  void scores(const Decision& d, float* out) const;  // out[num_candidates]
  int greedy(const Decision& d) const;               // argmax (first on ties)
};

// Writes `path` through a temporary (path + ".tmp", renamed into place); Error naming the file and the reason.
void save_policy(const Policy& policy, const std::string& path);
// Writes the policy file at `path` itself (no rename: train-policy moves its files into place together); Error
// naming the file and the reason (strerror), with nothing left at `path`.
void write_policy_file(const Policy& policy, const std::string& path);
// Throws InputError naming the file when it is missing, not a policy file, corrupt (size or CRC-32 of the body
// unlike its header's, a deck_crc32 that is no CRC-32), or written with another feature version than
// kFeatureVersion. With `source`, also what a run records of the file (its absolute path, size and CRC-32 of the
// very bytes read, and deck_crc32).
Policy load_policy(const std::string& path, sched::PolicySource* source = nullptr);

// scheduler.policy = "" resolves to the shipped default: inputs/policies/default.pt under the current
// directory, else under a directory above the binary's (build/..), or its share/conductor/ (an installed tree:
// bin/../share/conductor/inputs/policies/default.pt).
std::string resolve_policy_path(const std::string& configured);

}  // namespace conductor::policy
