#pragma once
// A backend over host memory that says its memory is not the host's (Backend::host_memory false), as a GPU's is
// not: code that hands host data to its kernels must stage it through upload and download. It runs the cpu
// backend's kernels, so its results are the cpu bits, and it checks each transfer's direction against its own
// allocations (upload: host to one of them; download: one of them to host; copy: between them), so a host buffer
// passed where backend memory belongs is caught here, where no GPU runs. Counts the bytes it uploads.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "conductor/model/backend.hpp"

namespace model_test {

class StagingBackend final : public conductor::model::Backend {
 public:
  StagingBackend() : Backend(conductor::model::cpu_backend().kernels()) {}
  std::string name() const override { return "staging"; }
  bool host_memory() const override { return false; }
  void* alloc(std::size_t bytes) override {
    void* p = host().alloc(bytes);
    blocks_[reinterpret_cast<std::uintptr_t>(p)] = bytes == 0 ? 1 : bytes;
    return p;
  }
  void release(void* p) override {
    blocks_.erase(reinterpret_cast<std::uintptr_t>(p));
    host().release(p);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes) && !owns(src, 1), "upload");
    uploaded_ += bytes;
    host().upload(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(src, bytes) && !owns(dst, 1), "download");
    host().download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes) && owns(src, bytes), "copy");
    host().copy(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes), "zero");
    host().zero(dst, bytes);
  }
  std::size_t uploaded() const { return uploaded_; }

 private:
  static Backend& host() { return conductor::model::cpu_backend(); }
  // [p, p + bytes) lies inside one of this backend's allocations.
  bool owns(const void* p, std::size_t bytes) const {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    auto it = blocks_.upper_bound(at);
    if (it == blocks_.begin()) return false;
    --it;
    return at + bytes <= it->first + it->second;
  }
  static void expect(bool ok, const char* what) {
    if (!ok) throw std::logic_error(std::string("staging backend: a ") + what + " between the wrong memories");
  }
  std::map<std::uintptr_t, std::size_t> blocks_;  // allocation -> bytes
  std::size_t uploaded_ = 0;
};

}  // namespace model_test
