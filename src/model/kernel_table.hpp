#pragma once
// The table through which the kernel functions (matmul.hpp ... adamw.hpp) reach a device's implementation. Each
// slot's type is taken from the kernel's one declaration, so an implementation whose signature differs from it
// does not compile into a table. Private to the model layer.
#include "conductor/model/adamw.hpp"
#include "conductor/model/attention.hpp"
#include "conductor/model/crossentropy.hpp"
#include "conductor/model/encoder.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"

namespace conductor::model {

namespace kernel = ::conductor::model;  // qualified: a slot must not take the meaning of its own name

struct KernelTable {
  decltype(&kernel::matmul_forward) matmul_forward = nullptr;
  decltype(&kernel::matmul_backward_input) matmul_backward_input = nullptr;
  decltype(&kernel::matmul_backward_weight) matmul_backward_weight = nullptr;
  decltype(&kernel::encoder_forward) encoder_forward = nullptr;
  decltype(&kernel::encoder_backward) encoder_backward = nullptr;
  decltype(&kernel::layernorm_forward) layernorm_forward = nullptr;
  decltype(&kernel::layernorm_backward_input) layernorm_backward_input = nullptr;
  decltype(&kernel::layernorm_backward_weight) layernorm_backward_weight = nullptr;
  decltype(&kernel::attention_forward) attention_forward = nullptr;
  decltype(&kernel::attention_backward) attention_backward = nullptr;
  decltype(&kernel::gelu_forward) gelu_forward = nullptr;
  decltype(&kernel::gelu_backward) gelu_backward = nullptr;
  decltype(&kernel::residual_forward) residual_forward = nullptr;
  decltype(&kernel::crossentropy_forward) crossentropy_forward = nullptr;
  decltype(&kernel::crossentropy_backward) crossentropy_backward = nullptr;
  decltype(&kernel::vocab_stats_forward) vocab_stats_forward = nullptr;
  decltype(&kernel::vocab_loss_forward) vocab_loss_forward = nullptr;
  decltype(&kernel::vocab_dlogits_backward) vocab_dlogits_backward = nullptr;
  decltype(&kernel::adamw_update) adamw_update = nullptr;
  decltype(&kernel::sum_squares) sum_squares = nullptr;
  decltype(&kernel::sum_squares_each) sum_squares_each = nullptr;
};

// The CPU implementations (cpu_kernels.cpp).
const KernelTable& cpu_kernel_table();

}  // namespace conductor::model
