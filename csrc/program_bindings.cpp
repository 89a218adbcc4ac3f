// Device programs for the compiler (torch_spyre._inductor): the kernel
// library's builders build each program at compile time from a description
// (loop kernels, matrix products, fused MLPs); the compiler serialises it
// into the compiled module, which loads it once per compiled kernel
// (CompiledProgram) and launches it per call.
#include "program_bindings.h"

#include <ATen/ops/empty_strided.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "allocator.h"
#include "device_state.h"
#include "ops/launch.h"
#include "spyre/kernels/loop_kernel.h"
#include "spyre/kernels/matmul.h"
#include "spyre/kernels/mlp.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/relayout.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/program.h"
#include "storage_ops.h"

namespace py = pybind11;
namespace rt = spyre::rt;
namespace kernels = spyre::kernels;

namespace {

rt::DType dtype_of(const std::string& name) {
  auto dtype = rt::dtype_from_name(name);
  if (!dtype) {
    throw std::invalid_argument("spyre program: unknown dtype '" + name +
                                "' (use float16, bfloat16, float32, int8, "
                                "int32, int64, bool or uint8)");
  }
  return *dtype;
}

// A built program as Python sees it: its facts, its serialised bytes, and
// set_arg to name a slot after the buffer bound to it and record the device
// layout its storage must have (checked at bind).
class Program {
 public:
  explicit Program(rt::Program program) : program_(std::move(program)) {}

  void set_arg(uint32_t slot, std::string name,
               std::vector<int64_t> device_size) {
    if (slot >= program_.args.size()) {
      throw std::invalid_argument("spyre program: no argument slot " +
                                  std::to_string(slot));
    }
    program_.args[slot].name = std::move(name);
    program_.args[slot].layout.device_size = std::move(device_size);
  }

  const rt::Program& program() const { return program_; }

 private:
  rt::Program program_;
};

void bind_program(py::module_& m) {
  py::class_<Program>(m, "Program")
      .def_property_readonly("name",
                             [](const Program& p) { return p.program().name; })
      .def("set_arg", &Program::set_arg, py::arg("slot"), py::arg("name"),
           py::arg("device_size"))
      .def_property_readonly("arg_names",
                             [](const Program& p) {
                               std::vector<std::string> names;
                               for (const auto& a : p.program().args) {
                                 names.push_back(a.name);
                               }
                               return names;
                             })
      .def("serialize",
           [](const Program& p) {
             std::vector<uint8_t> bytes = rt::serialize(p.program());
             return py::bytes(reinterpret_cast<const char*>(bytes.data()),
                              bytes.size());
           })
      .def_property_readonly(
          "num_args", [](const Program& p) { return p.program().args.size(); })
      .def_property_readonly(
          "num_cores",
          [](const Program& p) { return p.program().cores.size(); })
      .def_property_readonly("instruction_count", [](const Program& p) {
        return p.program().instruction_count();
      });
}

// What a builder plans for: the chip of spyre device `device` (-1: the
// current one), at most `max_cores` of its cores (None: all).
kernels::Target target_of(c10::DeviceIndex device,
                          std::optional<uint32_t> max_cores) {
  namespace glue = spyre::torch_glue;
  return {glue::device_chip(glue::resolve_device_index(device)),
          max_cores.value_or(0)};
}

// A matrix operand from Python: (dtype, byte offset of element (0, 0),
// row dims [(size, byte stride)] outermost first, cols, byte stride between
// sticks of a row, batch dims [(size, byte stride)]).
using DimList = std::vector<std::pair<uint64_t, int64_t>>;
using MatrixTuple =
    std::tuple<std::string, uint64_t, DimList, uint64_t, int64_t, DimList>;

std::vector<kernels::StridedDim> strided_dims(const DimList& dims) {
  std::vector<kernels::StridedDim> out;
  out.reserve(dims.size());
  for (const auto& [size, stride] : dims) out.push_back({size, stride});
  return out;
}

kernels::Matrix matrix_of(const MatrixTuple& t) {
  kernels::Matrix m = kernels::Matrix::strided(
      dtype_of(std::get<0>(t)), std::get<1>(t), strided_dims(std::get<2>(t)),
      std::get<3>(t), std::get<4>(t));
  m.batch_dims = strided_dims(std::get<5>(t));
  return m;
}

constexpr kernels::Activation kActivations[] = {
    kernels::Activation::kNone, kernels::Activation::kRelu,
    kernels::Activation::kGelu, kernels::Activation::kGeluTanh,
    kernels::Activation::kSilu};

kernels::Activation activation_of(const std::string& name) {
  for (kernels::Activation act : kActivations) {
    if (name == kernels::activation_name(act)) return act;
  }
  throw std::invalid_argument("spyre program: unknown matmul activation '" +
                              name + "'");
}

std::vector<std::string> activation_names() {
  std::vector<std::string> names;
  for (kernels::Activation act : kActivations) {
    names.emplace_back(kernels::activation_name(act));
  }
  return names;
}

// A matrix product built once by the kernel library's builder (the same one
// the eager ops use). Returns the program and its plan's description.
// `naive` selects the builder's documented baseline lowering (benchmarks).
std::pair<Program, std::string> build_matmul_program(
    const MatrixTuple& a, const MatrixTuple& b, const MatrixTuple& c,
    const std::optional<MatrixTuple>& bias, bool a_transposed,
    bool b_transposed, double alpha, double beta, const std::string& activation,
    c10::DeviceIndex device, std::optional<uint32_t> max_cores, bool naive) {
  kernels::MatmulShape shape(matrix_of(a), matrix_of(b), matrix_of(c));
  shape.a_transposed = a_transposed;
  shape.b_transposed = b_transposed;
  if (bias) shape.bias = matrix_of(*bias);
  shape.alpha = alpha;
  shape.beta = beta;
  shape.activation = activation_of(activation);
  kernels::MatmulOptions options;
  options.target = target_of(device, max_cores);
  options.lowering = naive ? kernels::MatmulLowering::kNaive
                           : kernels::MatmulLowering::kPlanned;
  const kernels::MatmulPlan plan = kernels::plan_matmul(shape, options);
  return {Program(kernels::build_matmul(shape, plan, options)),
          plan.describe()};
}

// A fused MLP (up-projection, activation, down-projection) in one program,
// by the kernel library's builder. Slots: x, w_up, w_down, y, then b_up and
// b_down when given.
std::pair<Program, std::string> build_mlp_program(
    const MatrixTuple& x, const MatrixTuple& w_up, const MatrixTuple& w_down,
    const MatrixTuple& y, const std::optional<MatrixTuple>& b_up,
    const std::optional<MatrixTuple>& b_down, bool w_up_transposed,
    bool w_down_transposed, const std::string& activation,
    c10::DeviceIndex device, std::optional<uint32_t> max_cores) {
  kernels::MlpShape shape;
  shape.x = matrix_of(x);
  shape.w_up = matrix_of(w_up);
  shape.w_down = matrix_of(w_down);
  shape.y = matrix_of(y);
  shape.w_up_transposed = w_up_transposed;
  shape.w_down_transposed = w_down_transposed;
  if (b_up) shape.b_up = matrix_of(*b_up);
  if (b_down) shape.b_down = matrix_of(*b_down);
  shape.activation = activation_of(activation);
  kernels::MlpOptions options;
  options.target = target_of(device, max_cores);
  const kernels::MlpPlan plan = kernels::plan_mlp(shape, options);
  return {Program(kernels::build_mlp(shape, plan, options)), plan.describe()};
}

// A re-layout (restickify: `output` = `input` transposed, each with its own
// stick dim) by the kernel library's builder, the one eager copies use: its
// pieces travel core to core and land through the transpose pipeline, or
// each core loads its columns when the rows are few. Slots: input, output.
Program build_restickify_program(const MatrixTuple& input,
                                 const MatrixTuple& output,
                                 c10::DeviceIndex device,
                                 std::optional<uint32_t> max_cores) {
  kernels::RelayoutOptions options;
  options.target = target_of(device, max_cores);
  return Program(
      kernels::build_restickify(matrix_of(input), matrix_of(output), options));
}

// A loop kernel's description (spyre/kernels/loop_kernel.h) from its plain
// Python form: dicts and lists of numbers and strings, the same structure
// JSON holds (so a description can be stored and rebuilt).
template <typename T>
T field(const py::dict& d, const char* key) {
  if (!d.contains(key)) {
    throw std::invalid_argument(
        std::string("spyre loop kernel description: missing field '") + key +
        "'");
  }
  return d[key].cast<T>();
}

template <typename T>
std::optional<T> optional_field(const py::dict& d, const char* key) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  return d[key].cast<T>();
}

kernels::LoopRole role_of(const std::string& name) {
  auto role = kernels::loop_role_from_name(name);
  if (!role) {
    throw std::invalid_argument(
        "spyre loop kernel description: unknown loop "
        "role '" +
        name + "' (outer, row, col or reduced)");
  }
  return *role;
}

std::optional<kernels::BufferAccess> access_of(const py::dict& d,
                                               const char* key) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  const py::dict a = d[key].cast<py::dict>();
  kernels::BufferAccess access;
  access.base = field<std::vector<int64_t>>(a, "base");
  for (const auto& v : field<py::list>(a, "vars")) {
    const auto [role, index, dim, step] =
        v.cast<std::tuple<std::string, uint32_t, uint32_t, int64_t>>();
    access.vars.push_back({role_of(role), index, dim, step});
  }
  return access;
}

kernels::LoopKernel loop_kernel_of(const py::dict& d) {
  kernels::LoopKernel k;
  k.name = field<std::string>(d, "name");
  k.outer = field<std::vector<int64_t>>(d, "outer");
  k.rows = optional_field<int64_t>(d, "rows");
  k.cols = optional_field<int64_t>(d, "cols");
  k.col_tail = optional_field<int64_t>(d, "col_tail");
  for (const auto& n : field<py::list>(d, "nodes")) {
    k.nodes.push_back(
        {field<std::vector<int64_t>>(n.cast<py::dict>(), "reduced_outer")});
  }
  for (const auto& item : field<py::list>(d, "buffers")) {
    const py::dict b = item.cast<py::dict>();
    kernels::LoopBuffer buf;
    buf.name = field<std::string>(b, "name");
    buf.dtype = dtype_of(field<std::string>(b, "dtype"));
    buf.device_bytes = field<uint64_t>(b, "device_bytes");
    buf.is_output = field<bool>(b, "is_output");
    buf.device_size = field<std::vector<int64_t>>(b, "device_size");
    buf.host_sizes = field<std::vector<int64_t>>(b, "host_sizes");
    buf.stick_stride_bytes = field<int64_t>(b, "stick_stride_bytes");
    buf.dim_stride_bytes = field<std::vector<int64_t>>(b, "dim_stride_bytes");
    if (b.contains("offset_bytes")) {
      buf.offset_bytes = field<uint64_t>(b, "offset_bytes");
    }
    buf.shares_sticks =
        optional_field<bool>(b, "shares_sticks").value_or(false);
    k.buffers.push_back(std::move(buf));
  }
  for (const auto& item : field<py::list>(d, "ops")) {
    const py::dict o = item.cast<py::dict>();
    kernels::LoopOp op;
    const auto kind_name = field<std::string>(o, "op");
    auto kind = kernels::loop_op_kind_from_name(kind_name);
    if (!kind) {
      throw std::invalid_argument(
          "spyre loop kernel description: unknown op kind '" + kind_name + "'");
    }
    op.kind = *kind;
    op.node = field<uint32_t>(o, "node");
    if (o.contains("args")) op.args = field<std::vector<uint32_t>>(o, "args");
    if (auto name = optional_field<std::string>(o, "name")) op.name = *name;
    if (o.contains("dtype")) {
      auto dtype = optional_field<std::string>(o, "dtype");
      op.dtype = dtype ? std::optional(dtype_of(*dtype)) : std::nullopt;
    }
    op.to_float = optional_field<bool>(o, "to_float").value_or(false);
    op.value = optional_field<double>(o, "value").value_or(0.0);
    if (auto buffer = optional_field<std::string>(o, "buffer")) {
      op.buffer = *buffer;
    }
    op.access = access_of(o, "access");
    if (o.contains("terms")) {
      for (const auto& t : field<py::list>(o, "terms")) {
        const auto [role, index, coeff] =
            t.cast<std::tuple<std::string, uint32_t, int64_t>>();
        op.terms.push_back({role_of(role), index, coeff});
      }
    }
    op.constant = optional_field<int64_t>(o, "constant").value_or(0);
    op.part = optional_field<uint32_t>(o, "part").value_or(0);
    op.value2 = optional_field<double>(o, "value2").value_or(0.0);
    op.scale = optional_field<double>(o, "scale").value_or(1.0);
    op.seed = optional_field<uint64_t>(o, "seed").value_or(0);
    op.counter = optional_field<uint64_t>(o, "counter").value_or(0);
    k.ops.push_back(std::move(op));
  }
  for (const auto& item : field<py::list>(d, "stores")) {
    const py::dict s = item.cast<py::dict>();
    k.stores.push_back({field<uint32_t>(s, "node"), field<uint32_t>(s, "value"),
                        field<std::string>(s, "buffer"),
                        access_of(s, "access")});
  }
  return k;
}

// A loop kernel's program, built for device `device` (its cores and
// scratchpad) by the kernel library. Returns the program and the work
// division (a dict: cores, blocks, rows_per_block, region_bytes,
// double_buffered, instructions, cross_core_reduction).
std::pair<Program, py::dict> build_loop_kernel_program(
    const py::dict& description, c10::DeviceIndex device,
    std::optional<uint32_t> max_cores, bool double_buffer) {
  const kernels::LoopKernel kernel = loop_kernel_of(description);
  kernels::LoopKernelOptions options;
  options.target = target_of(device, max_cores);
  options.double_buffer = double_buffer;
  kernels::LoopKernelProgram built =
      kernels::build_loop_kernel(kernel, options);
  const kernels::LoopKernelSummary& s = built.summary;
  py::dict summary;
  summary["cores"] = s.cores;
  summary["blocks"] = s.blocks;
  summary["rows_per_block"] = s.rows_per_block;
  summary["region_bytes"] = s.region_bytes;
  summary["double_buffered"] = s.double_buffered;
  summary["instructions"] = s.instructions;
  if (s.cross_core_reduction) summary["cross_core_reduction"] = true;
  return {Program(std::move(built.program)), summary};
}

void bind_builders(py::module_& m) {
  m.def("build_mlp", &build_mlp_program, py::arg("x"), py::arg("w_up"),
        py::arg("w_down"), py::arg("y"), py::arg("b_up") = std::nullopt,
        py::arg("b_down") = std::nullopt, py::arg("w_up_transposed") = false,
        py::arg("w_down_transposed") = false, py::arg("activation") = "gelu",
        py::arg("device") = -1, py::arg("max_cores") = std::nullopt);
  m.def("build_matmul", &build_matmul_program, py::arg("a"), py::arg("b"),
        py::arg("c"), py::arg("bias") = std::nullopt,
        py::arg("a_transposed") = false, py::arg("b_transposed") = false,
        py::arg("alpha") = 1.0, py::arg("beta") = 1.0,
        py::arg("activation") = "none", py::arg("device") = -1,
        py::arg("max_cores") = std::nullopt, py::arg("naive") = false);
  m.def("build_restickify", &build_restickify_program, py::arg("input"),
        py::arg("output"), py::arg("device") = -1,
        py::arg("max_cores") = std::nullopt);
  m.def("build_loop_kernel", &build_loop_kernel_program, py::arg("description"),
        py::arg("device") = -1, py::arg("max_cores") = std::nullopt,
        py::arg("double_buffer") = true);
  m.def("matmul_activations", &activation_names,
        "Epilogue activations build_matmul applies (names as in "
        "kernels::activation_name).");
}

namespace glue = spyre::torch_glue;

// A compiled kernel's program on one device, loaded once through the shared
// launch layer's per-device cache (keyed by the program's digest, computed
// by the caller) and launched per call with the kernel's tensors.
class CompiledProgram {
 public:
  CompiledProgram(const py::bytes& data, const std::string& digest,
                  c10::DeviceIndex index)
      : index_(glue::resolve_device_index(index)) {
    std::string_view view = data;
    const rt::DeviceProperties& props =
        glue::runtime_device(index_).properties();
    program_ = &glue::ops::cached_program(index_, "inductor:" + digest, [&] {
      return rt::deserialize(
          std::span<const uint8_t>(
              reinterpret_cast<const uint8_t*>(view.data()), view.size()),
          props.limits());
    });
  }

  // Returns how many tensors were bound as copies (relayouts).
  uint64_t launch(const std::vector<at::Tensor>& tensors) {
    const auto& slots = program_->program().args;
    if (tensors.size() != slots.size()) {
      throw std::invalid_argument("spyre program '" + program_->program().name +
                                  "' takes " + std::to_string(slots.size()) +
                                  " tensors, got " +
                                  std::to_string(tensors.size()));
    }
    // The program assumed each tensor dense at the start of its storage, in
    // the default layout of its dense shape (it binds whole storages), and
    // writes its outputs in whole sticks. A tensor from elsewhere (an extern
    // kernel's result, a view of a larger storage, one starting further in:
    // Dynamo does not guard on storage offsets) may not be: it is bound as a
    // copy in the assumed layout (counted), and an output's copy is copied
    // back into it after the launch (masked writes that leave the rest of
    // its storage alone).
    std::vector<at::Tensor> bound(tensors.begin(), tensors.end());
    std::vector<size_t> written_back;
    uint64_t copied = 0;
    for (size_t i = 0; i < bound.size(); ++i) {
      const rt::ArgSlot& slot = slots[i];
      if (bindable(bound[i], slot)) continue;
      at::Tensor copy = at::empty_strided(bound[i].sizes(), bound[i].strides(),
                                          bound[i].options());
      copy.copy_(bound[i]);
      bound[i] = copy;
      ++copied;
      if (slot.is_output) written_back.push_back(i);
    }
    glue::ops::launch(*program_, bound);
    for (size_t i : written_back) tensors[i].copy_(bound[i]);
    ++launches_;
    relayouts_ += copied;
    return copied;
  }

  uint64_t launches() const { return launches_; }

  // Whether `tensor` is what `slot` assumed: at the start of its storage, in
  // the slot's layout, and, written, the whole of its storage (its sticks
  // shared with nothing else).
  static bool bindable(const at::Tensor& tensor, const rt::ArgSlot& slot) {
    if (slot.layout.device_size.empty()) return true;
    const glue::DeviceLayout& layout = glue::tensor_layout(tensor);
    if (glue::image_offset(tensor) != 0 ||
        layout.device_size != slot.layout.device_size) {
      return false;
    }
    return !slot.is_output ||
           layout.host_bytes() ==
               static_cast<size_t>(tensor.numel()) * tensor.element_size();
  }
  uint64_t relayouts() const { return relayouts_; }
  const rt::Program& program() const { return program_->program(); }

 private:
  c10::DeviceIndex index_;
  const rt::LoadedProgram* program_ = nullptr;  // owned by the cache
  uint64_t launches_ = 0;
  uint64_t relayouts_ = 0;
};

void bind_compiled(py::module_& m) {
  py::class_<CompiledProgram>(m, "CompiledProgram")
      .def(py::init<const py::bytes&, const std::string&, c10::DeviceIndex>(),
           py::arg("data"), py::arg("digest"), py::arg("device"))
      .def("launch", &CompiledProgram::launch)
      .def_property_readonly("launches", &CompiledProgram::launches)
      .def_property_readonly("relayouts", &CompiledProgram::relayouts)
      .def_property_readonly(
          "name", [](const CompiledProgram& c) { return c.program().name; });
}

}  // namespace

namespace spyre::torch_glue {

void bind_programs(py::module_& m) {
  bind_program(m);
  bind_builders(m);
  bind_compiled(m);
  auto& build_error = py::register_exception<kernels::KernelBuildError>(
      m, "KernelBuildError", PyExc_RuntimeError);
  // registered later, so tried first: a subclass of KernelBuildError
  py::register_exception<kernels::LoopKernelTooLarge>(m, "LoopKernelTooLarge",
                                                      build_error.ptr());
}

}  // namespace spyre::torch_glue
