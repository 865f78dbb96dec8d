#pragma once
// A helper's request and answer in its backend's memory (host-staged), shared by the layers' groups
// (stage_migration.cpp) and the LM head's vocabulary groups (stage_vocab.cpp). Private to the model layer.
#include <span>
#include <vector>

#include "conductor/model/backend.hpp"

namespace conductor::model {

// A helper's request in its backend's memory (host-staged): read in place on a backend of host memory, else
// uploaded once into a buffer of its own. So one helper path serves the cpu and the cuda backends.
class StagedRequest {
 public:
  StagedRequest(Backend& be, std::span<const float> host) {
    if (be.host_memory()) {
      at_ = host.data();
      return;
    }
    buf_ = DeviceBuffer(be, host.size_bytes());
    be.upload(buf_.get(), host.data(), host.size_bytes());
    at_ = buf_.f();
  }
  const float* f() const { return at_; }

 private:
  DeviceBuffer buf_;
  const float* at_ = nullptr;
};

// A helper's answer: written in place into the host vector on a backend of host memory, else into a buffer of
// the backend's, downloaded once at the end (take). Zero-initialised (W's gradient blocks start at zero).
class StagedAnswer {
 public:
  StagedAnswer(Backend& be, std::size_t floats) : be_(be), host_(floats, 0.0f) {
    if (be.host_memory()) {
      at_ = host_.data();
      return;
    }
    buf_ = DeviceBuffer(be, floats * sizeof(float));
    be.zero(buf_.get(), buf_.bytes());
    at_ = buf_.f();
  }
  float* f() const { return at_; }
  std::vector<float> take() {
    if (buf_.get()) be_.download(host_.data(), buf_.get(), buf_.bytes());
    return std::move(host_);
  }

 private:
  Backend& be_;
  std::vector<float> host_;
  DeviceBuffer buf_;
  float* at_ = nullptr;
};

}  // namespace conductor::model
