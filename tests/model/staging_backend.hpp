#pragma once
// A backend over host memory that behaves, for the code above it, as a GPU's memory does: not the host's.
//   - Backend::host_memory() is false, so code that hands host data to its kernels must stage it through upload and
//     download;
//   - each transfer's direction is checked against its own allocations (upload: host to one of them; download: one
//     of them to host; copy: between them), so a host buffer passed where backend memory belongs throws;
//   - its memory cannot be touched from the host outside its own calls: each allocation is whole pages of one
//     reserved range, mapped PROT_NONE except while one of its kernels or transfers runs, so host code that reads or
//     writes backend memory directly (a std::copy from a device pointer, which a GPU would not allow) crashes the test
//     at that access.
// The kernels are the cpu backend's (each slot of its table wrapped to open the memory around the call), so its
// results are the cpu bits. Counts the bytes it uploads. For the model tests only: it reads the model layer's
// private kernel table (src/model/kernel_table.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "conductor/model/backend.hpp"
#include "kernel_table.hpp"

namespace model_test {

class StagingBackend final : public conductor::model::Backend {
 public:
  StagingBackend() : Backend(guarded_table()) {
    // One reserved range, allocations taken from it in page multiples and never reused, so opening and closing
    // the memory is one mprotect of the used part however many allocations there are.
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
  }
  ~StagingBackend() override { munmap(base_, kReserve); }
  StagingBackend(const StagingBackend&) = delete;
  StagingBackend& operator=(const StagingBackend&) = delete;

  std::string name() const override { return "staging"; }
  bool host_memory() const override { return false; }
  void* alloc(std::size_t bytes) override {
    const std::size_t n = bytes == 0 ? 1 : bytes, pages = mapped(n);
    if (top_ + pages > kReserve) throw std::bad_alloc();
    char* p = base_ + top_;
    top_ += pages;
    if (open_ > 0) mprotect(p, pages, PROT_READ | PROT_WRITE);  // allocated inside a kernel: open like the rest
    blocks_[reinterpret_cast<std::uintptr_t>(p)] = n;
    return p;
  }
  void release(void* p) override {
    const auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == blocks_.end()) return;
    madvise(p, mapped(it->second), MADV_DONTNEED);  // its pages go back; the range is not reused
    blocks_.erase(it);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes) && !owns(src, 1), "upload");
    uploaded_ += bytes;
    const Open open(*this);
    host().upload(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(src, bytes) && !owns(dst, 1), "download");
    const Open open(*this);
    host().download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes) && owns(src, bytes), "copy");
    const Open open(*this);
    host().copy(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (!bytes) return;
    expect(owns(dst, bytes), "zero");
    const Open open(*this);
    host().zero(dst, bytes);
  }
  std::size_t uploaded() const { return uploaded_; }

 private:
  // The memory readable and writable for the scope of one of this backend's calls (nested calls share it).
  class Open {
   public:
    explicit Open(StagingBackend& be) : be_(be) {
      if (be_.open_++ == 0) be_.protect(PROT_READ | PROT_WRITE);
    }
    ~Open() {
      if (--be_.open_ == 0) be_.protect(PROT_NONE);
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    StagingBackend& be_;
  };

  // A kernel slot of the cpu table, run with the memory open: `Slot` names the slot, and the backend is the
  // kernel's last argument (backend.hpp).
  template <auto Slot, class Fn>
  struct Guarded;
  template <auto Slot, class R, class... A>
  struct Guarded<Slot, R (*)(A...)> {
    static R call(A... a) {
      auto& be = static_cast<StagingBackend&>(std::get<sizeof...(A) - 1>(std::tie(a...)));
      const Open open(be);
      return (host().kernels().*Slot)(a...);
    }
  };
  template <auto Slot>
  static constexpr auto guarded() {
    using Fn = std::remove_cvref_t<decltype(std::declval<conductor::model::KernelTable>().*Slot)>;
    return &Guarded<Slot, Fn>::call;
  }
  static const conductor::model::KernelTable& guarded_table() {
    using conductor::model::KernelTable;
    static const KernelTable table = [] {
      KernelTable k;
      k.matmul_forward = guarded<&KernelTable::matmul_forward>();
      k.matmul_backward_input = guarded<&KernelTable::matmul_backward_input>();
      k.matmul_backward_weight = guarded<&KernelTable::matmul_backward_weight>();
      k.encoder_forward = guarded<&KernelTable::encoder_forward>();
      k.encoder_backward = guarded<&KernelTable::encoder_backward>();
      k.layernorm_forward = guarded<&KernelTable::layernorm_forward>();
      k.layernorm_backward_input = guarded<&KernelTable::layernorm_backward_input>();
      k.layernorm_backward_weight = guarded<&KernelTable::layernorm_backward_weight>();
      k.attention_forward = guarded<&KernelTable::attention_forward>();
      k.attention_backward = guarded<&KernelTable::attention_backward>();
      k.gelu_forward = guarded<&KernelTable::gelu_forward>();
      k.gelu_backward = guarded<&KernelTable::gelu_backward>();
      k.residual_forward = guarded<&KernelTable::residual_forward>();
      k.crossentropy_forward = guarded<&KernelTable::crossentropy_forward>();
      k.crossentropy_backward = guarded<&KernelTable::crossentropy_backward>();
      k.vocab_stats_forward = guarded<&KernelTable::vocab_stats_forward>();
      k.vocab_loss_forward = guarded<&KernelTable::vocab_loss_forward>();
      k.vocab_dlogits_backward = guarded<&KernelTable::vocab_dlogits_backward>();
      k.adamw_update = guarded<&KernelTable::adamw_update>();
      k.sum_squares = guarded<&KernelTable::sum_squares>();
      k.sum_squares_each = guarded<&KernelTable::sum_squares_each>();
      return k;
    }();
    return table;
  }

  static Backend& host() { return conductor::model::cpu_backend(); }
  static std::size_t mapped(std::size_t bytes) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  void protect(int prot) const {
    if (top_ > 0) mprotect(base_, top_, prot);
  }
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
  static constexpr std::size_t kReserve = std::size_t{1} << 34;  // 16 GiB of address space, committed as touched
  char* base_ = nullptr;
  std::size_t top_ = 0;                           // bytes of the range taken
  std::map<std::uintptr_t, std::size_t> blocks_;  // allocation -> bytes
  int open_ = 0;                                  // nesting depth of calls with the memory open
  std::size_t uploaded_ = 0;
};

}  // namespace model_test
