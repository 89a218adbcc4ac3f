// Launching device programs for eager ops (and compiled code): what every
// kernel in csrc/ops/ goes through. A kernel describes its operands
// (operands.h), writes a key of everything its program depends on
// (program_key.h) and launches the cached program on its tensors:
//
//   rt::DType dt = device_dtype(t.scalar_type());      // or has_device_dtype
//   std::optional<kernels::StickOperand> op =
//       stick_operand(t, sizes, strides, offset);       // how a kernel reads
//                                                       // or writes a view
//   at::Tensor m = materialize(t);                      // a view no kernel
//                                                       // can address ->
//                                                       // fresh default layout
//   kernels::KeyWriter key;
//   key.add("family").add(scalar); append_key(key, matrix); ...
//   launch_cached(device, ProgramKey(std::move(key)),   // slot i <- tensor i
//                 [&] { return kernels::build_...(...); }, {in0, in1, out});
//
// - Profiling: every launch is a RecordFunction named "spyre::<family>"
//   (the program's name without its shape suffix: "spyre::matmul",
//   "spyre::add"), so torch.profiler shows it inside the aten op that made
//   it; ProfilerActivity.PrivateUse1 / use_device="spyre" adds each op's
//   modelled device time (profiler.cpp).
// - bind: a tensor's ArgBinding is its whole storage (device pointer, the
//   layout's device bytes, dtype, device_size); kernels address views inside
//   it through byte offsets (see StickOperand), so slot offsets, not
//   bindings, carry storage offsets.
// - launch: binds, relocates and verifies synchronously (errors raise here,
//   as torch errors), then queues the launch on the current c10 stream of
//   the tensors' device, so it is ordered with copies and events like any
//   other work on that stream. The queued launch owns a share of its program
//   and of the tensors' storages, so both outlive it whatever the caller and
//   the program cache do meanwhile; its LaunchStats become
//   torch.spyre.last_launch_stats().
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/FunctionRef.h>

#include <initializer_list>
#include <string_view>

#include "ops/op_stats.h"
#include "ops/operands.h"
#include "ops/program_cache.h"
#include "spyre/kernels/elementwise.h"
#include "spyre/runtime/patcher.h"

namespace spyre::torch_glue {

// The CPU fallback (fallback.cpp): counted, warned once, an error in strict
// mode. Kernels hand it what they cannot run (at::native::call_fallback_fn).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace ops {

// A composite op (linear, matmul, rms_norm) this backend runs as one launch
// must still decompose the way PyTorch's CompositeImplicitAutograd kernel
// would when autograd has to record it or when a tracer (fake tensors,
// functionalization under torch.compile) sees it: those modes then see the
// ops it is made of rather than this backend's kernel.
bool composite_must_decompose(std::initializer_list<const at::Tensor*> args);

rt::ArgBinding bind(const at::Tensor& tensor);
// Slot i of `program` is bound to tensors[i]; all on one spyre device.
// `program` must be owned by a shared_ptr (every cache holds its programs
// so); the queued launch takes a share of it.
void launch(const rt::LoadedProgram& program,
            c10::ArrayRef<at::Tensor> tensors);
void launch(LoadedProgramPtr program, c10::ArrayRef<at::Tensor> tensors);
// The bounded cache's program under `key` (built by `build` on a miss),
// launched as launch() does.
void launch_cached(c10::DeviceIndex device, const ProgramKey& key,
                   c10::function_ref<rt::Program()> build,
                   c10::ArrayRef<at::Tensor> tensors);

// out = steps(inputs), elementwise over out's shape; inputs (spyre tensors on
// out's device) broadcast to it as in PyTorch. Values are numbered as in
// kernels::ElementwiseStep: inputs first; the last step writes out, rounding
// once to out's dtype. Views are handled: an input a kernel cannot address
// is materialized first; an output it cannot address is computed into a
// fresh tensor and written through the host (counted). No checks of dtype
// promotion or overlap here: callers (ops) do those as PyTorch does.
// Launches seen before skip the operand analysis (launch_memo.h).
void launch_elementwise(std::string_view name, c10::ArrayRef<at::Tensor> inputs,
                        const at::Tensor& out,
                        c10::ArrayRef<kernels::ElementwiseStep> steps);

// dst <- src on one device by a device program: src broadcasts, dtypes
// convert (nonzero -> true for bool), views on both sides honoured.
void device_copy(const at::Tensor& src, const at::Tensor& dst);

}  // namespace ops
}  // namespace spyre::torch_glue
