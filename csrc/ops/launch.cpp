#include "ops/launch.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "allocator.h"
#include "device_state.h"
#include "ops/launch_memo.h"
#include "ops/restickify.h"
#include "spyre/runtime/stream.h"
#include "storage_ops.h"

namespace spyre::torch_glue::ops {
namespace {

// The family of a program for profiles: its name without the shape suffix
// kernels append ("matmul_64x128x256" -> "matmul"), so key_averages() groups
// all shapes of one kernel.
std::string profiler_name(const rt::Program& program) {
  const std::string& name = program.name;
  size_t end = name.size();
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] == '_' &&
        std::isdigit(static_cast<unsigned char>(name[i + 1]))) {
      end = i;
      break;
    }
  }
  return "spyre::" + name.substr(0, end);
}

// A torch.profiler range around a launch (free when no profiler is on).
class LaunchRange {
 public:
  explicit LaunchRange(const rt::LoadedProgram& program)
      : range_(at::RecordScope::FUNCTION) {
    if (range_.isActive()) {
      name_ = profiler_name(program.program());
      range_.before(std::string_view(name_));
    }
  }

 private:
  std::string name_;
  at::RecordFunction range_;
};

bool same_view(const at::Tensor& a, const std::vector<int64_t>& a_strides,
               const at::Tensor& b, const std::vector<int64_t>& b_strides) {
  return image_offset(a) == image_offset(b) && a_strides == b_strides;
}

// Runs the launch the memo knows under `signature` on the tensors as given;
// false when it does not know it or its program is no longer loaded.
bool launch_remembered(KeyView signature, c10::ArrayRef<at::Tensor> inputs,
                       const at::Tensor& out) {
  const ProgramKey* key = LaunchMemo::of_this_thread().find(signature);
  if (key == nullptr) return false;
  LoadedProgramPtr program = find_program(out.device().index(), *key);
  if (!program) return false;
  c10::SmallVector<at::Tensor, 4> tensors(inputs.begin(), inputs.end());
  tensors.push_back(out);
  launch(std::move(program), tensors);
  return true;
}

}  // namespace

bool composite_must_decompose(std::initializer_list<const at::Tensor*> args) {
  const auto traced = c10::DispatchKeySet(
      {c10::DispatchKey::Python, c10::DispatchKey::Functionalize});
  for (const at::Tensor* t : args) {
    if (t == nullptr || !t->defined()) continue;
    if (at::GradMode::is_enabled() && t->requires_grad()) return true;
    if (!(t->key_set() & traced).empty()) return true;
  }
  return false;
}

rt::ArgBinding bind(const at::Tensor& tensor) {
  const Allocation& allocation = allocation_of(tensor.storage());
  rt::ArgBinding binding;
  binding.ptr = allocation.ptr;
  binding.bytes = allocation.layout->device_bytes();
  binding.dtype = device_dtype(tensor.scalar_type());
  binding.device_size = allocation.layout->device_size;
  return binding;
}

void launch(LoadedProgramPtr program, c10::ArrayRef<at::Tensor> tensors) {
  TORCH_CHECK(!tensors.empty(), "spyre: a launch needs tensors");
  const LaunchRange range(*program);
  const c10::Device device = tensors[0].device();
  std::vector<rt::ArgBinding> bindings;
  std::vector<c10::Storage> keep;
  bindings.reserve(tensors.size());
  keep.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    TORCH_CHECK_VALUE(tensor.device() == device,
                      "spyre: expected all tensors on ", device, ", got ",
                      tensor.device());
    bindings.push_back(bind(tensor));
    keep.push_back(tensor.storage());
  }
  const c10::DeviceIndex index = device.index();
  rt::Stream& stream = runtime_stream(current_stream(index));
  call_runtime([&] {
    rt::LoadedProgram::launch(
        std::move(program), stream, bindings,
        [index, keep = std::move(keep)](const rt::LaunchStats& s) {
          record_finished_launch(index, s);
        });
  });
  ++op_counters().launches;
}

void launch(const rt::LoadedProgram& program,
            c10::ArrayRef<at::Tensor> tensors) {
  launch(program.shared_from_this(), tensors);
}

void launch_cached(c10::DeviceIndex device, const ProgramKey& key,
                   c10::function_ref<rt::Program()> build,
                   c10::ArrayRef<at::Tensor> tensors) {
  launch(lookup_program(device, key, build), tensors);
}

namespace {

// out's iteration, with a unit rows dim when an input can be read in place
// only so: its rows step a part of a stick (the heads of a decode step,
// [batch, heads, 1, head_dim] split off [batch, 1, hidden]), which a batch
// dim may do and the rows dim may not.
Iteration iteration_for(c10::ArrayRef<at::Tensor> inputs,
                        const at::Tensor& out) {
  Iteration plain(out);
  const Iteration unit_rows(out, /*unit_rows=*/true);
  auto readable = [&](const Iteration& it, const at::Tensor& input) {
    return stick_operand(input, it.sizes(), it.strides(input, out.dim(), false),
                         input.storage_offset())
        .has_value();
  };
  for (const at::Tensor& input : inputs) {
    if (shares_memory(input, out)) continue;
    if (!readable(plain, input) && readable(unit_rows, input)) return unit_rows;
  }
  return plain;
}

}  // namespace

void launch_elementwise(std::string_view name, c10::ArrayRef<at::Tensor> inputs,
                        const at::Tensor& out,
                        c10::ArrayRef<kernels::ElementwiseStep> steps) {
  if (out.numel() == 0) return;
  // Written into a buffer kept per thread (no allocation once warm), and
  // copied out only on the full path, which may launch (and so write
  // signatures) itself.
  thread_local kernels::KeyWriter scratch;
  scratch.clear();
  std::optional<ProgramKey> signature;
  if (write_launch_signature(scratch, name, inputs, out, steps)) {
    const KeyView written(scratch.bytes());
    if (launch_remembered(written, inputs, out)) return;
    signature.emplace(written);
  }
  const Iteration it = iteration_for(inputs, out);
  const std::vector<int64_t>& sizes = it.sizes();
  const std::vector<int64_t> out_strides = it.strides(out, out.dim(), true);
  auto out_operand =
      stick_operand(out, sizes, out_strides, out.storage_offset());
  // An output is written in whole runs of sticks (kSticks) only.
  if (out_operand &&
      (out_operand->cols != kernels::StickOperand::Cols::kSticks ||
       !out_operand->lane_steps.empty())) {
    out_operand.reset();
  }
  if (!out_operand) {
    at::Tensor fresh = empty_like_default(out);
    launch_elementwise(name, inputs, fresh, steps);
    write_unaddressable(fresh, out);
    return;
  }
  kernels::ElementwiseKernel kernel;
  kernel.name = name;
  kernel.target = {device_chip(out.device().index())};
  kernel.shape = sizes;
  kernel.output = *out_operand;
  kernel.output_shares_sticks = write_shares_sticks(out, sizes, *out_operand);
  kernel.steps.assign(steps.begin(), steps.end());
  std::vector<at::Tensor> tensors;
  tensors.reserve(inputs.size() + 1);
  bool as_given = true;  // no input replaced by a copy
  for (const at::Tensor& given : inputs) {
    TORCH_CHECK_VALUE(given.device() == out.device(), "spyre: ", name,
                      ": expected all tensors on ", out.device(), ", got ",
                      given.device());
    at::Tensor input = given;
    std::vector<int64_t> strides = it.strides(input, out.dim(), false);
    // An input sharing the output's storage through another view could be
    // read by one core after another core wrote it: read a copy instead.
    if (shares_memory(input, out) &&
        !same_view(input, strides, out, out_strides)) {
      input = materialize(input);
      strides = it.strides(input, out.dim(), false);
    }
    auto operand = stick_operand(input, sizes, strides, input.storage_offset());
    if (!operand) {
      input = materialize(input);
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    if (!operand) {  // broadcast the way this layout cannot: expand it
      input = materialize(input.expand(out.sizes()));
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    if (!operand) {
      // out runs in another memory order than any default layout (a
      // permuted out=): lay the input out densely in out's memory order
      // (out's own strides may skip elements: a transposed slice), through
      // the host.
      at::Tensor like = at::empty_strided(
          out.sizes(), at::infer_dense_strides(out.sizes(), out.strides()),
          input.options());
      write_unaddressable(input.expand(out.sizes()), like);
      input = like;
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    TORCH_INTERNAL_ASSERT(operand.has_value(), "spyre: ", name,
                          ": a materialized input is not addressable");
    as_given = as_given && input.is_same(given);
    kernel.inputs.push_back(*operand);
    tensors.push_back(std::move(input));
  }
  tensors.push_back(out);
  const c10::DeviceIndex device = out.device().index();
  const bool random = std::any_of(
      steps.begin(), steps.end(), [](const kernels::ElementwiseStep& step) {
        return step.kind == kernels::ElementwiseStep::Kind::kRandom;
      });
  if (random) {  // a fresh generator state: a program that never repeats
    launch(load_program(device, kernels::build_elementwise(kernel)), tensors);
    return;
  }
  kernels::KeyWriter written;
  kernel.append_key(written);
  const ProgramKey key(std::move(written));
  launch_cached(
      device, key, [&] { return kernels::build_elementwise(kernel); }, tensors);
  if (signature && as_given) {
    LaunchMemo::of_this_thread().remember(*signature, key);
  }
}

void device_copy(const at::Tensor& src, const at::Tensor& dst) {
  // A source along other sticks than dst (a transpose made contiguous) is
  // re-laid out straight into dst; one that shares dst's storage is copied
  // by the elementwise path, which reads a snapshot of it first.
  if (!shares_memory(src, dst) && restickify_copy(src, dst)) {
    return;
  }
  const bool to_bool =
      dst.scalar_type() == at::kBool && src.scalar_type() != at::kBool;
  const kernels::ElementwiseStep step =
      to_bool ? kernels::scalar_step(rt::VecOp::kNe, 0, 0, rt::DType::kBool)
              : kernels::copy_step();
  launch_elementwise("copy", {src}, dst, {step});
}

}  // namespace spyre::torch_glue::ops
