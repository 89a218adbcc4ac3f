// Launching device programs for eager ops (and compiled code): the shared
// infrastructure every kernel in csrc/ops/ goes through.
//
// API, in the order a kernel uses it:
//
//   rt::DType dt = device_dtype(t.scalar_type());      // or has_device_dtype
//   std::optional<kernels::StickOperand> op =
//       stick_operand(t, sizes, strides, offset);       // how a kernel reads
//                                                       // or writes a view
//   at::Tensor m = materialize(t);                      // a view no kernel
//                                                       // can address ->
//                                                       // fresh default layout
//   launch_cached(device, key,                         // slot i <- tensor i
//                 [&] { return kernels::build_...(...); }, {in0, in1, out});
//
// - Profiling: every launch is a RecordFunction named "spyre::<family>"
//   (the program's name without its shape suffix: "spyre::matmul",
//   "spyre::add"), so torch.profiler shows it inside the aten op that made
//   it; ProfilerActivity.PrivateUse1 / use_device="spyre" adds each op's
//   modelled device time (profiler.cpp).
//
// - launch_cached: a per-device cache of loaded programs keyed by a string
//   the caller builds from everything the program depends on (shapes,
//   dtypes, placements, scalars). `build` runs (and the program is loaded:
//   validate, patch plan, prepare) only on a miss; a hit costs one hash
//   lookup. The least recently used programs are evicted beyond a capacity;
//   a queued launch keeps its program alive. Compiled kernels, which hold a
//   reference to their program, pin it with cached_program instead.
// - bind: a tensor's ArgBinding is its whole storage (device pointer, the
//   layout's device bytes, dtype, device_size); kernels address views inside
//   it through byte offsets (see StickOperand), so slot offsets, not
//   bindings, carry storage offsets.
// - launch: binds, relocates and verifies synchronously (errors raise here,
//   as torch errors), then queues the launch on the current c10 stream of
//   the tensors' device, so it is ordered with copies and events like any
//   other work on that stream. The storages stay alive until the launch ran;
//   its LaunchStats become torch.spyre.last_launch_stats().
// - Padding: bytes of a stick beyond a row's last element are unspecified
//   after a kernel wrote the storage; kernels never read them as data.
// - materialize: a copy in the default layout, contiguous, offset 0. Done by
//   a device program when the view is addressable as a StickOperand, else
//   through the host image (counted: op_stats().host_materializations).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "device_layout.h"
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

// The device dtype of a torch dtype; nullopt when the device has none
// (float64, int16, ...: such ops go to the CPU fallback).
std::optional<rt::DType> maybe_device_dtype(at::ScalarType type);
bool has_device_dtype(at::ScalarType type);
rt::DType device_dtype(at::ScalarType type);  // raises when there is none

// ---- programs --------------------------------------------------------------
// Pinned: the program stays loaded for the life of the process, for callers
// that keep the reference (compiled kernels, program_bindings.cpp). Eager
// ops use launch_cached, whose cache is bounded.
const rt::LoadedProgram& cached_program(c10::DeviceIndex device,
                                        const std::string& key,
                                        c10::function_ref<rt::Program()> build);

// Looks `key` up in the device's bounded program cache (least recently used
// programs evicted beyond program_cache_capacity()), builds and loads on a
// miss, and launches it on `tensors` as launch() does. A queued launch keeps
// its program alive after eviction.
void launch_cached(c10::DeviceIndex device, const std::string& key,
                   c10::function_ref<rt::Program()> build,
                   c10::ArrayRef<at::Tensor> tensors);
// Programs the bounded cache keeps per device: SPYRE_PROGRAM_CACHE_SIZE, else
// kDefaultProgramCacheCapacity. Setting it evicts down to the new size.
constexpr size_t kDefaultProgramCacheCapacity = 4096;
size_t program_cache_capacity();
void set_program_cache_capacity(size_t capacity);

// ---- binding and launching -------------------------------------------------
rt::ArgBinding bind(const at::Tensor& tensor);
// Slot i of `program` is bound to tensors[i]; all on one spyre device.
void launch(const rt::LoadedProgram& program,
            c10::ArrayRef<at::Tensor> tensors);

// ---- operands --------------------------------------------------------------
// How a kernel addresses the elements of `tensor`'s storage seen through
// (sizes, strides, offset) (elements, as PyTorch's as_strided): the last dim
// becomes the kernel's cols dim, the others its outer dims. nullopt when the
// storage's layout cannot serve that view with stick transfers (e.g. the
// cols dim does not run along the sticks); materialize() such views.
std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor,
                                                   at::IntArrayRef sizes,
                                                   at::IntArrayRef strides,
                                                   int64_t offset);
// The same for the tensor's own view.
std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor);

// True when writing the stick operand of (sizes, strides, offset) whole
// sticks would overwrite elements outside the view (the kernel must read
// the sticks first).
bool write_needs_read(const at::Tensor& tensor, at::IntArrayRef sizes,
                      const kernels::StickOperand& operand);

// `tensor`'s values in a fresh contiguous tensor with the default layout.
at::Tensor materialize(const at::Tensor& tensor);
// `tensor` itself when a kernel can address it, else materialize(tensor).
at::Tensor addressable(const at::Tensor& tensor);

// ---- elementwise launches -------------------------------------------------
// out = steps(inputs), elementwise over out's shape; inputs (spyre tensors on
// out's device) broadcast to it as in PyTorch. Values are numbered as in
// kernels::ElementwiseStep: inputs first; the last step writes out, rounding
// once to out's dtype. Views are handled: an input a kernel cannot address
// is materialized first; an output it cannot address is computed into a
// fresh tensor and written through the host (counted). No checks of dtype
// promotion or overlap here: callers (ops) do those as PyTorch does.
void launch_elementwise(const std::string& name,
                        c10::ArrayRef<at::Tensor> inputs, const at::Tensor& out,
                        c10::ArrayRef<kernels::ElementwiseStep> steps);

// dst <- src on one device by a device program: src broadcasts, dtypes
// convert (nonzero -> true for bool), views on both sides honoured.
void device_copy(const at::Tensor& src, const at::Tensor& dst);

// ---- counters (torch.spyre.op_stats()) -------------------------------------
struct OpStats {
  uint64_t launches = 0;
  uint64_t program_hits = 0;
  uint64_t program_misses = 0;  // programs built and loaded
  uint64_t device_materializations = 0;
  uint64_t host_materializations = 0;
  uint64_t program_evictions = 0;  // from the bounded cache
  uint64_t cached_programs = 0;    // now in the bounded caches, all devices
};
OpStats op_stats();
void reset_op_stats();

// ---- modelled device time (torch.spyre.device_time_stats()) ---------------
// Sums over all devices of the work that has run since the last reset
// (queued work counts once it ran: synchronize before reading).
struct DeviceTimeStats {
  uint64_t launches = 0;
  double launch_ns = 0;           // modelled time of kernel launches
  uint64_t launch_dma_bytes = 0;  // device memory <-> scratchpad
  uint64_t copies = 0;            // host<->device and device<->device
  double copy_ns = 0;             // modelled time of those copies
  uint64_t copy_bytes = 0;        // device bytes moved by them
};
DeviceTimeStats device_time_stats();
void reset_device_time_stats();
// Called by copy work (on the stream's thread) once it ran.
void record_copy_time(double ns, uint64_t bytes);

}  // namespace ops
}  // namespace spyre::torch_glue
