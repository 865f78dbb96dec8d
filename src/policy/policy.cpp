#include "conductor/policy/policy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize/archive.h>

#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/text_file.hpp"
#include "nets.hpp"

namespace conductor::policy {

namespace detail {

ActorImpl::ActorImpl(int hidden) {
  l1 = register_module("l1", torch::nn::Linear(kNumFeatures, hidden));
  l2 = register_module("l2", torch::nn::Linear(hidden, hidden));
  l3 = register_module("l3", torch::nn::Linear(hidden, 1));
  skip = register_module("skip", torch::nn::Linear(torch::nn::LinearOptions(kNumFeatures, 1).bias(false)));
}

torch::Tensor ActorImpl::forward(const torch::Tensor& x) {
  auto h = torch::relu(l1(x));
  h = torch::relu(l2(h));
  return (l3(h) + skip(x)).squeeze(-1);
}

CriticImpl::CriticImpl(int hidden) {
  l1 = register_module("l1", torch::nn::Linear(kNumGlobal, hidden));
  l2 = register_module("l2", torch::nn::Linear(hidden, hidden));
  l3 = register_module("l3", torch::nn::Linear(hidden, 1));
}

torch::Tensor CriticImpl::forward(const torch::Tensor& g) {
  auto h = torch::relu(l1(g));
  h = torch::relu(l2(h));
  return l3(h).squeeze(-1);
}

void init_heuristic(Actor& actor) {
  torch::NoGradGuard guard;
  // The MLP starts almost silent; the skip term ranks candidates like the heuristic (feature 15 = its rank).
  actor->l3->weight.mul_(0.01);
  actor->l3->bias.zero_();
  actor->skip->weight.zero_();
  actor->skip->weight[0][15] = -1.0;
}

namespace {
std::vector<float> flat(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
}  // namespace

Policy to_policy(Actor& actor, Critic& critic, sched::Hint heuristic) {
  Policy p;
  p.hidden = static_cast<int>(actor->l1->weight.size(0));
  p.heuristic = heuristic;
  p.w1 = flat(actor->l1->weight);
  p.b1 = flat(actor->l1->bias);
  p.w2 = flat(actor->l2->weight);
  p.b2 = flat(actor->l2->bias);
  p.w3 = flat(actor->l3->weight);
  p.b3 = flat(actor->l3->bias)[0];
  p.skip = flat(actor->skip->weight);
  p.c1 = flat(critic->l1->weight);
  p.cb1 = flat(critic->l1->bias);
  p.c2 = flat(critic->l2->weight);
  p.cb2 = flat(critic->l2->bias);
  p.c3 = flat(critic->l3->weight);
  p.cb3 = flat(critic->l3->bias)[0];
  p.prepare();
  return p;
}

}  // namespace detail

Policy Policy::initial(int hidden, sched::Hint heuristic, unsigned long long seed) {
  torch::manual_seed(seed);
  detail::Actor actor(hidden);
  detail::Critic critic(hidden);
  detail::init_heuristic(actor);
  return detail::to_policy(actor, critic, heuristic);
}

void Policy::prepare() {
  const int H = hidden;
  w1t.assign(static_cast<std::size_t>(kNumFeatures) * H, 0.0f);
  w2t.assign(static_cast<std::size_t>(H) * H, 0.0f);
  for (int j = 0; j < H; ++j) {
    for (int k = 0; k < kNumFeatures; ++k)
      w1t[static_cast<std::size_t>(k) * H + j] = w1[static_cast<std::size_t>(j) * kNumFeatures + k];
    for (int k = 0; k < H; ++k) w2t[static_cast<std::size_t>(k) * H + j] = w2[static_cast<std::size_t>(j) * H + k];
  }
}

float Policy::score(const float* x) const {
  const int H = hidden;
  // h1 [H], h2 [H]; inner loops run over the contiguous output index, so they vectorize.
  float h1[256], h2[256];
  for (int j = 0; j < H; ++j) h1[j] = b1[j];
  for (int k = 0; k < kNumFeatures; ++k) {
    const float xk = x[k];
    const float* w = &w1t[static_cast<std::size_t>(k) * H];
    for (int j = 0; j < H; ++j) h1[j] += w[j] * xk;
  }
  for (int j = 0; j < H; ++j) h2[j] = b2[j];
  for (int k = 0; k < H; ++k) {
    const float hk = h1[k] > 0.0f ? h1[k] : 0.0f;
    const float* w = &w2t[static_cast<std::size_t>(k) * H];
    for (int j = 0; j < H; ++j) h2[j] += w[j] * hk;
  }
  float out = b3;
  for (int k = 0; k < H; ++k) out += w3[k] * (h2[k] > 0.0f ? h2[k] : 0.0f);
  for (int k = 0; k < kNumFeatures; ++k) out += skip[k] * x[k];
  return out;
}

void Policy::scores(const Decision& d, float* out) const {
  for (int c = 0; c < d.num_candidates; ++c) out[c] = score(&d.features[static_cast<std::size_t>(c) * kNumFeatures]);
}

int Policy::greedy(const Decision& d) const {
  float s[kMaxCandidates];
  scores(d, s);
  return static_cast<int>(std::max_element(s, s + d.num_candidates) - s);
}

namespace {

const char* kMagic = "conductor-policy";

torch::Tensor tensor_of(const std::vector<float>& v, std::vector<std::int64_t> shape) {
  return torch::from_blob(const_cast<float*>(v.data()), shape, torch::kFloat32).clone();
}

// The header's body_bytes and body_crc32 (written by save_policy) against the bytes after the header, before
// LibTorch parses them: a truncated or damaged file is one InputError, never a half-read policy.
void verify_body(const std::string& path, const std::map<std::string, std::string>& kv, const std::string& body) {
  const auto bytes = kv.find("body_bytes");
  const auto crc = kv.find("body_crc32");
  std::uint32_t want = 0;
  if (bytes == kv.end() && crc == kv.end()) {
    throw InputError("policy file '" + path +
                     "' has no body_crc32/body_bytes in its header (written before policy checksums: re-stamp it "
                     "with scripts/stamp-policy.py or retrain it)");
  }
  // Present but damaged, the header is no pre-checksum one: re-stamping would vouch for bytes no checksum covers.
  if (bytes == kv.end() || crc == kv.end() || !util::parse_crc32_hex(crc->second, want)) {
    throw InputError("policy file '" + path + "' is corrupt: its header's " +
                     (crc == kv.end() ? std::string("body_crc32 is missing")
                      : bytes == kv.end()
                          ? std::string("body_bytes is missing")
                          : "body_crc32 = '" + printable(crc->second) + "' is not 0x and 8 lower-case hex digits") +
                     "; retrain it, or restore it from a copy");
  }
  if (bytes->second != std::to_string(body.size())) {
    throw InputError("policy file '" + path + "' is corrupt: its body has " + std::to_string(body.size()) +
                     " bytes, its header says " + bytes->second + " (truncated or appended to)");
  }
  const std::uint32_t have = util::crc32(body.data(), body.size());
  if (have != want) {
    throw InputError("policy file '" + path + "' is corrupt: its body's CRC-32 is " + util::crc32_hex(have) +
                     ", its header says " + crc->second + " (changed bytes)");
  }
}

}  // namespace

void write_policy_file(const Policy& p, const std::string& path) {
  const int H = p.hidden;
  torch::serialize::OutputArchive ar;
  ar.write("actor.l1.weight", tensor_of(p.w1, {H, kNumFeatures}));
  ar.write("actor.l1.bias", tensor_of(p.b1, {H}));
  ar.write("actor.l2.weight", tensor_of(p.w2, {H, H}));
  ar.write("actor.l2.bias", tensor_of(p.b2, {H}));
  ar.write("actor.l3.weight", tensor_of(p.w3, {1, H}));
  ar.write("actor.l3.bias", torch::full({1}, p.b3));
  ar.write("actor.skip.weight", tensor_of(p.skip, {1, kNumFeatures}));
  ar.write("critic.l1.weight", tensor_of(p.c1, {H, kNumGlobal}));
  ar.write("critic.l1.bias", tensor_of(p.cb1, {H}));
  ar.write("critic.l2.weight", tensor_of(p.c2, {H, H}));
  ar.write("critic.l2.bias", tensor_of(p.cb2, {H}));
  ar.write("critic.l3.weight", tensor_of(p.c3, {1, H}));
  ar.write("critic.l3.bias", torch::full({1}, p.cb3));
  std::ostringstream body;
  ar.save_to(body);
  const std::string b = body.str();
  std::ostringstream header;
  header << kMagic << " feature_version=" << kFeatureVersion << " features=" << kNumFeatures << " global=" << kNumGlobal
         << " hidden=" << H << " heuristic=" << sched::to_string(p.heuristic)
         << (p.deck_crc32.empty() ? "" : " deck_crc32=" + p.deck_crc32) << " body_bytes=" << b.size()
         << " body_crc32=" << util::crc32_hex(util::crc32(b.data(), b.size())) << "\n";
  const std::string bytes = header.str() + b;
  // stdio rather than a stream, for errno: the error says why (a full disk, a file-size limit, a folder there).
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write policy file '" + path + "': " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const std::string reason = std::strerror(written ? errno : err);
    std::error_code ec;
    std::filesystem::remove(path, ec);  // never a half-written policy left behind
    throw Error("cannot write policy file '" + path + "': " + reason);
  }
}

void save_policy(const Policy& p, const std::string& path) {
  // Write to a temporary name and rename, so a crash never leaves a half-written policy under the real name.
  const std::string tmp = path + ".tmp";
  write_policy_file(p, tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

namespace {

// The header line's key=value words, after the magic; InputError when the line is not a conductor policy's.
std::map<std::string, std::string> read_header(const std::string& path, std::istream& f) {
  std::string header;
  std::getline(f, header);
  if (header.rfind(kMagic, 0) != 0) {
    throw InputError("policy file '" + path + "' is not a conductor policy (its first line does not start with '" +
                     kMagic + "')");
  }
  std::map<std::string, std::string> kv;
  std::istringstream hs(header.substr(std::string(kMagic).size()));
  std::string tok;
  while (hs >> tok) {
    const auto eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

// An empty policy of the header's shape (hidden width, heuristic), after its feature version and counts are
// checked against this build's.
Policy policy_of_header(const std::string& path, const std::map<std::string, std::string>& kv) {
  auto get_int = [&](const char* key) {
    auto it = kv.find(key);
    try {
      std::size_t used = 0;
      if (it != kv.end()) {
        const int v = std::stoi(it->second, &used);
        if (used == it->second.size()) return v;
      }
    } catch (const std::exception&) {
    }
    throw InputError("policy file '" + path + "' is corrupt: its header's '" + key + "' is " +
                     (it == kv.end() ? std::string("missing") : "'" + printable(it->second) + "'") +
                     ", not an integer");
  };
  const int version = get_int("feature_version");
  if (version != kFeatureVersion) {
    throw InputError("policy file '" + path + "' was written with feature version " + std::to_string(version) +
                     ", this build uses feature version " + std::to_string(kFeatureVersion) +
                     "; retrain it with `conductor train-policy DECK` (make policy for the shipped one)");
  }
  if (const int features = get_int("features"), global = get_int("global");
      features != kNumFeatures || global != kNumGlobal) {
    throw InputError("policy file '" + path +
                     "' is corrupt: its header's feature counts (features=" + std::to_string(features) +
                     ", global=" + std::to_string(global) + ") are not feature version " + std::to_string(version) +
                     "'s (features=" + std::to_string(kNumFeatures) + ", global=" + std::to_string(kNumGlobal) + ")");
  }
  Policy p;
  p.hidden = get_int("hidden");
  if (p.hidden < 1 || p.hidden > 256)
    throw InputError("policy file '" + path + "' is corrupt: its header's hidden=" + std::to_string(p.hidden) +
                     " is outside 1 .. 256");
  try {
    const auto h = kv.find("heuristic");
    p.heuristic = sched::parse_hint(h != kv.end() ? h->second : "");
  } catch (const InputError&) {
    const auto h = kv.find("heuristic");
    throw InputError("policy file '" + path + "' is corrupt: its header's 'heuristic' is " +
                     (h == kv.end() ? std::string("missing") : "'" + printable(h->second) + "'") +
                     " (allowed: schedule, bf, bfw or critical, as ppo.heuristic)");
  }
  // The rankings a policy is trained with (ppo.heuristic): backfill is a readiness hint, never a policy's guide.
  if (p.heuristic == sched::Hint::Backfill) {
    throw InputError("policy file '" + path +
                     "' is corrupt: its header's heuristic 'backfill' is not one a policy is trained with (schedule, "
                     "bf, bfw or critical, as ppo.heuristic)");
  }
  if (const auto d = kv.find("deck_crc32"); d != kv.end()) {
    std::uint32_t crc = 0;
    if (!util::parse_crc32_hex(d->second, crc)) {
      throw InputError("policy file '" + path + "' is corrupt: its header's deck_crc32 = '" + d->second +
                       "' is no CRC-32 (0x and 8 lowercase hex digits)");
    }
    p.deck_crc32 = util::crc32_hex(crc);
  }
  return p;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// LibTorch's (c10's) message, made fit for a user: its first line, without c10's "(Could this error message be
// improved? ...)" plea, the "Exception raised from" location or a stack trace, and its internal checks said in
// words ("Expected hasRecord("version") to be true, but got false." is an archive without a 'version' record).
std::string torch_reason(const std::exception& e) {
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  for (const char* cut : {"(Could this error message", "Exception raised from"}) {
    if (const auto at = what.find(cut); at != std::string::npos) what.erase(at);
  }
  // c10's source location ("[enforce fail at inline_container.cc:129] . ") says nothing to a user.
  if (what.rfind("[enforce fail at ", 0) == 0) {
    const auto end = what.find("] ");
    what = end == std::string::npos ? std::string() : what.substr(end + 2);
    if (what.rfind(". ", 0) == 0) what.erase(0, 2);
  }
  const std::string locating = "failed locating file ";
  if (const auto at = what.find(locating); at != std::string::npos) {
    const auto start = at + locating.size();
    return "it has no '" + what.substr(start, what.find(':', start) - start) + "' record";
  }
  // LibTorch's own advice ("please upgrade PyTorch") is not what a conductor user can follow.
  const std::string newer = "Attempted to read a PyTorch file with version ";
  if (const auto at = what.find(newer); at != std::string::npos) {
    const auto start = at + newer.size();
    return "its format version " + what.substr(start, what.find(',', start) - start) +
           " is not one this conductor's LibTorch reads: written by another LibTorch, or damaged";
  }
  if (what.find("data is not allocated yet") != std::string::npos) return "a tensor's data is missing";
  if (what.find("istream reader failed") != std::string::npos) return "the archive is cut short";
  const std::string has_record = "Expected hasRecord(\"";
  if (const auto at = what.find(has_record); at != std::string::npos) {
    const auto start = at + has_record.size();
    const auto end = what.find('"', start);
    if (end != std::string::npos) return "it has no '" + what.substr(start, end - start) + "' record";
  }
  while (!what.empty() && (what.back() == ' ' || what.back() == '.')) what.pop_back();
  return what.empty() ? "LibTorch gave no reason" : what;
}

// The networks' tensors from the (checksummed) body, each of its expected shape.
void read_tensors(const std::string& path, const std::string& body, Policy& p) {
  const int H = p.hidden;
  std::istringstream bs(body);
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(bs);
  } catch (const std::exception& e) {
    throw InputError("policy file '" + path + "' is corrupt: its tensor archive is not a LibTorch archive (" +
                     torch_reason(e) + ")");
  }
  std::size_t needed = 0;  // bytes of the tensors' data, by their shapes
  auto read = [&](const char* name, std::vector<std::int64_t> shape) {
    torch::Tensor t;
    try {
      if (!ar.try_read(name, t)) {
        throw InputError("policy file '" + path + "' is corrupt: its tensor archive has no tensor '" + name + "'");
      }
      if (t.sizes().vec() != shape) {
        throw InputError("policy file '" + path + "' is corrupt: tensor '" + name + "' has shape " +
                         shape_text(t.sizes().vec()) + ", the header's sizes (hidden=" + std::to_string(H) + ") need " +
                         shape_text(shape));
      }
      if (t.scalar_type() != torch::kFloat32) {
        throw InputError("policy file '" + path + "' is corrupt: tensor '" + name + "' holds " +
                         std::string(c10::toString(t.scalar_type())) + " numbers, not float32");
      }
      needed += static_cast<std::size_t>(t.numel()) * sizeof(float);
      return detail::flat(t);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError("policy file '" + path + "' is corrupt: its tensor '" + name + "' cannot be read (" +
                       torch_reason(e) + ")");
    }
  };
  p.w1 = read("actor.l1.weight", {H, kNumFeatures});
  p.b1 = read("actor.l1.bias", {H});
  p.w2 = read("actor.l2.weight", {H, H});
  p.b2 = read("actor.l2.bias", {H});
  p.w3 = read("actor.l3.weight", {1, H});
  p.b3 = read("actor.l3.bias", {1})[0];
  p.skip = read("actor.skip.weight", {1, kNumFeatures});
  p.c1 = read("critic.l1.weight", {H, kNumGlobal});
  p.cb1 = read("critic.l1.bias", {H});
  p.c2 = read("critic.l2.weight", {H, H});
  p.cb2 = read("critic.l2.bias", {H});
  p.c3 = read("critic.l3.weight", {1, H});
  p.cb3 = read("critic.l3.bias", {1})[0];
  // A data record shorter than its tensor's shape is read past its end (LibTorch allocates by the shape): other
  // memory's bytes, different from run to run. The records must hold every byte the shapes need.
  std::size_t stored = 0;
  try {
    std::istringstream rs(body);
    caffe2::serialize::PyTorchStreamReader records(&rs);
    for (const std::string& record : records.getAllRecords()) {
      if (record.rfind("data/", 0) == 0) stored += std::get<1>(records.getRecord(record));
    }
  } catch (const std::exception& e) {
    throw InputError("policy file '" + path + "' is corrupt: its tensor archive's records cannot be read (" +
                     torch_reason(e) + ")");
  }
  if (stored < needed) {
    throw InputError("policy file '" + path + "' is corrupt: its tensors' data records hold " + std::to_string(stored) +
                     " bytes, their shapes need " + std::to_string(needed));
  }
}

}  // namespace

Policy load_policy(const std::string& path, sched::PolicySource* source) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // A name too long for the file system (or a folder on the way that cannot be searched) is said as such: the
    // throwing exists() passed a raw "filesystem error" through.
    throw InputError("policy file '" + path + "' cannot be opened (" +
                     (ec ? ec.message() : std::string("no such file")) +
                     "); train one with `conductor train-policy DECK` or set scheduler.policy");
  }
  // Read whole, after read_text_input's checks: a folder, a device or a file far larger than any policy (hidden
  // <= 256: a few MB) is named as such instead of "not a conductor policy" or a read that never ends.
  constexpr std::uintmax_t kMaxPolicyBytes = 64u << 20;
  const std::string bytes = read_text_input(path, "policy file", kMaxPolicyBytes);
  std::istringstream f(bytes);
  const std::map<std::string, std::string> kv = read_header(path, f);
  Policy p = policy_of_header(path, kv);
  std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  verify_body(path, kv, body);
  read_tensors(path, body, p);
  for (const auto* v : {&p.w1, &p.b1, &p.w2, &p.b2, &p.w3, &p.skip}) {
    for (float x : *v) {
      if (!std::isfinite(x)) throw InputError("policy file '" + path + "' is corrupt: non-finite weights");
    }
  }
  p.prepare();
  if (source) {
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    source->path = ec ? path : absolute.lexically_normal().string();
    source->bytes = bytes.size();
    source->crc32 = util::crc32_hex(util::crc32(bytes.data(), bytes.size()));
    source->deck_crc32 = p.deck_crc32;
  }
  return p;
}

std::string resolve_policy_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  const std::string rel = "inputs/policies/default.pt";
  std::error_code ec;
  if (std::filesystem::exists(rel, ec)) return rel;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      for (const auto& cand : {dir / rel, dir / "share/conductor" / rel}) {  // source tree; installed (make install)
        if (std::filesystem::exists(cand, ec)) return cand.string();
      }
    }
  }
  return rel;  // missing: load_policy names it
}

}  // namespace conductor::policy
