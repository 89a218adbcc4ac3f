// The launch memo of elementwise launches.
//
// Describing an elementwise kernel (operand analysis) and writing its program
// cache key cost more host time than the rest of an eager launch. The memo
// skips both for a launch seen before: the launch's signature (name, steps,
// device, and every operand's dtype, sizes, strides, offset and storage
// layout: all the kernel is derived from) maps to the program key the full
// path wrote. Only launches the full path ran on the tensors as given are
// remembered (nothing materialized), and the program cache still decides
// what stays loaded: a remembered key whose program was evicted takes the
// full path.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <string_view>

#include "ops/program_key.h"
#include "spyre/kernels/elementwise.h"

namespace spyre::torch_glue::ops {

// Writes the signature of launch_elementwise(name, inputs, out, steps) to
// `signature`. False (and `signature` unusable) for launches that always
// take the full path: random steps (a fresh program each time), operands on
// other devices (the full path raises), an input sharing out's storage
// through another view (it is read from a copy).
bool write_launch_signature(kernels::KeyWriter& signature,
                            std::string_view name,
                            c10::ArrayRef<at::Tensor> inputs,
                            const at::Tensor& out,
                            c10::ArrayRef<kernels::ElementwiseStep> steps);

// Per thread, so a lookup takes no lock. Bounded: a process cycling through
// many shapes forgets them all at once when it is full (remembering is
// cheap, the full path only costs what it cost before the memo).
class LaunchMemo {
 public:
  static LaunchMemo& of_this_thread();

  // The program key remembered for `signature`, or null.
  const ProgramKey* find(KeyView signature) const;
  void remember(KeyView signature, const ProgramKey& key);

 private:
  static constexpr size_t kCapacity = 1024;
  KeyMap<ProgramKey> keys_;
};

}  // namespace spyre::torch_glue::ops
