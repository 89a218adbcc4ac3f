// Device programs from Python: the compiler (torch_spyre._inductor) builds
// an rt::Program instruction by instruction through `ProgramSpec`, serialises
// it into the compiled module, and loads it once per compiled kernel.
//
// Tiles cross the boundary as tuples (offset, dtype name, row_stride,
// col_stride); stick transfers as keyword arguments named after the fields
// of rt::StickTransfer.
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
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/program.h"

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

using TileTuple = std::tuple<uint32_t, std::string, int32_t, int32_t>;

rt::Tile tile_of(const TileTuple& t) {
  return rt::Tile{std::get<0>(t), dtype_of(std::get<1>(t)), std::get<2>(t),
                  std::get<3>(t)};
}

// rt::Program plus the per-core lookup the builder methods need.
class ProgramSpec {
 public:
  explicit ProgramSpec(std::string name) { program_.name = std::move(name); }
  explicit ProgramSpec(rt::Program program) : program_(std::move(program)) {}

  uint32_t add_arg(std::string name, const std::string& dtype, uint64_t bytes,
                   bool is_output, std::vector<int64_t> device_size) {
    rt::ArgSlot slot;
    slot.name = std::move(name);
    slot.dtype = dtype_of(dtype);
    slot.bytes = bytes;
    slot.is_output = is_output;
    slot.layout.device_size = std::move(device_size);
    program_.args.push_back(std::move(slot));
    return static_cast<uint32_t>(program_.args.size() - 1);
  }

  // Returns the core's index in the program (the handle of later calls).
  uint32_t add_core(uint32_t core, uint32_t scratchpad_bytes) {
    rt::CoreProgram cp;
    cp.core = core;
    cp.scratchpad_bytes = scratchpad_bytes;
    program_.cores.push_back(std::move(cp));
    return static_cast<uint32_t>(program_.cores.size() - 1);
  }

  // Names a slot after the buffer bound to it and records the device layout
  // its storage must have (checked at bind).
  void set_arg(uint32_t slot, std::string name,
               std::vector<int64_t> device_size) {
    if (slot >= program_.args.size()) {
      throw std::invalid_argument("spyre program: no argument slot " +
                                  std::to_string(slot));
    }
    program_.args[slot].name = std::move(name);
    program_.args[slot].layout.device_size = std::move(device_size);
  }

  void set_scratchpad_bytes(uint32_t index, uint32_t bytes) {
    at(index).scratchpad_bytes = bytes;
  }

  template <typename Inst>
  void emit(uint32_t index, Inst inst) {
    at(index).instructions.emplace_back(std::move(inst));
  }

  const rt::Program& program() const { return program_; }
  rt::Program& program() { return program_; }

 private:
  rt::CoreProgram& at(uint32_t index) {
    if (index >= program_.cores.size()) {
      throw std::invalid_argument("spyre program: core index " +
                                  std::to_string(index) + " was not added");
    }
    return program_.cores[index];
  }

  rt::Program program_;
};

rt::StickTransfer transfer(uint32_t slot, uint64_t offset, uint32_t spad,
                           uint32_t run_bytes, uint32_t count1, uint32_t count2,
                           int64_t dram_stride1, int64_t dram_stride2,
                           uint32_t spad_stride1, uint32_t spad_stride2,
                           uint32_t share_group) {
  rt::StickTransfer x;
  x.dram = rt::SymAddr{slot, offset};
  x.spad = spad;
  x.run_bytes = run_bytes;
  x.count1 = count1;
  x.count2 = count2;
  x.dram_stride1 = dram_stride1;
  x.dram_stride2 = dram_stride2;
  x.spad_stride1 = spad_stride1;
  x.spad_stride2 = spad_stride2;
  x.share_group = share_group;
  return x;
}

size_t instruction_count(const rt::Program& p) {
  size_t n = 0;
  for (const auto& core : p.cores) n += core.instructions.size();
  return n;
}

void bind_enums(py::module_& m) {
  py::enum_<rt::VecOp>(m, "VecOp")
      .value("copy", rt::VecOp::kCopy)
      .value("neg", rt::VecOp::kNeg)
      .value("abs", rt::VecOp::kAbs)
      .value("exp", rt::VecOp::kExp)
      .value("log", rt::VecOp::kLog)
      .value("sqrt", rt::VecOp::kSqrt)
      .value("rsqrt", rt::VecOp::kRsqrt)
      .value("recip", rt::VecOp::kRecip)
      .value("tanh", rt::VecOp::kTanh)
      .value("sigmoid", rt::VecOp::kSigmoid)
      .value("relu", rt::VecOp::kRelu)
      .value("gelu", rt::VecOp::kGelu)
      .value("gelu_tanh", rt::VecOp::kGeluTanh)
      .value("silu", rt::VecOp::kSilu)
      .value("erf", rt::VecOp::kErf)
      .value("sin", rt::VecOp::kSin)
      .value("cos", rt::VecOp::kCos)
      .value("logical_not", rt::VecOp::kLogicalNot)
      .value("floor", rt::VecOp::kFloor)
      .value("add", rt::VecOp::kAdd)
      .value("sub", rt::VecOp::kSub)
      .value("mul", rt::VecOp::kMul)
      .value("div", rt::VecOp::kDiv)
      .value("max", rt::VecOp::kMax)
      .value("min", rt::VecOp::kMin)
      .value("pow", rt::VecOp::kPow)
      .value("eq", rt::VecOp::kEq)
      .value("ne", rt::VecOp::kNe)
      .value("lt", rt::VecOp::kLt)
      .value("le", rt::VecOp::kLe)
      .value("gt", rt::VecOp::kGt)
      .value("ge", rt::VecOp::kGe)
      .value("logical_and", rt::VecOp::kLogicalAnd)
      .value("logical_or", rt::VecOp::kLogicalOr)
      .value("remainder", rt::VecOp::kRemainder)
      .value("select", rt::VecOp::kSelect)
      .value("fill", rt::VecOp::kFill)
      .value("iota", rt::VecOp::kIota);
  py::enum_<rt::RedOp>(m, "RedOp")
      .value("sum", rt::RedOp::kSum)
      .value("max", rt::RedOp::kMax)
      .value("min", rt::RedOp::kMin)
      .value("argmax", rt::RedOp::kArgMax)
      .value("argmin", rt::RedOp::kArgMin)
      .value("prod", rt::RedOp::kProd);
}

void bind_spec(py::module_& m) {
  py::class_<ProgramSpec>(m, "ProgramSpec")
      .def(py::init<std::string>(), py::arg("name"))
      .def_property_readonly(
          "name", [](const ProgramSpec& s) { return s.program().name; })
      .def("add_arg", &ProgramSpec::add_arg, py::arg("name"), py::arg("dtype"),
           py::arg("bytes"), py::arg("is_output"),
           py::arg("device_size") = std::vector<int64_t>{})
      .def("add_core", &ProgramSpec::add_core, py::arg("core"),
           py::arg("scratchpad_bytes"))
      .def("set_scratchpad_bytes", &ProgramSpec::set_scratchpad_bytes)
      .def("set_arg", &ProgramSpec::set_arg, py::arg("slot"), py::arg("name"),
           py::arg("device_size"))
      .def_property_readonly("arg_names",
                             [](const ProgramSpec& s) {
                               std::vector<std::string> names;
                               for (const auto& a : s.program().args) {
                                 names.push_back(a.name);
                               }
                               return names;
                             })
      .def(
          "dma_load",
          [](ProgramSpec& s, uint32_t core, uint32_t slot, uint64_t offset,
             uint32_t spad, uint32_t run_bytes, uint32_t count1,
             uint32_t count2, int64_t dram_stride1, int64_t dram_stride2,
             uint32_t spad_stride1, uint32_t spad_stride2,
             uint32_t share_group) {
            s.emit(core, rt::DmaLoad{transfer(slot, offset, spad, run_bytes,
                                              count1, count2, dram_stride1,
                                              dram_stride2, spad_stride1,
                                              spad_stride2, share_group)});
          },
          py::arg("core"), py::arg("slot"), py::arg("offset"), py::arg("spad"),
          py::arg("run_bytes"), py::arg("count1") = 1, py::arg("count2") = 1,
          py::arg("dram_stride1") = 0, py::arg("dram_stride2") = 0,
          py::arg("spad_stride1") = 0, py::arg("spad_stride2") = 0,
          py::arg("share_group") = 0)
      .def(
          "dma_store",
          [](ProgramSpec& s, uint32_t core, uint32_t slot, uint64_t offset,
             uint32_t spad, uint32_t run_bytes, uint32_t count1,
             uint32_t count2, int64_t dram_stride1, int64_t dram_stride2,
             uint32_t spad_stride1, uint32_t spad_stride2) {
            s.emit(core,
                   rt::DmaStore{transfer(slot, offset, spad, run_bytes, count1,
                                         count2, dram_stride1, dram_stride2,
                                         spad_stride1, spad_stride2, 0)});
          },
          py::arg("core"), py::arg("slot"), py::arg("offset"), py::arg("spad"),
          py::arg("run_bytes"), py::arg("count1") = 1, py::arg("count2") = 1,
          py::arg("dram_stride1") = 0, py::arg("dram_stride2") = 0,
          py::arg("spad_stride1") = 0, py::arg("spad_stride2") = 0)
      .def(
          "vector",
          [](ProgramSpec& s, uint32_t core, rt::VecOp op, const TileTuple& dst,
             const TileTuple& src0, const TileTuple& src1,
             const TileTuple& src2, uint32_t rows, uint32_t cols,
             bool src1_is_imm, double imm, double imm2) {
            rt::Vector v;
            v.op = op;
            v.dst = tile_of(dst);
            v.src0 = tile_of(src0);
            v.src1 = tile_of(src1);
            v.src2 = tile_of(src2);
            v.rows = rows;
            v.cols = cols;
            v.src1_is_imm = src1_is_imm;
            v.imm = imm;
            v.imm2 = imm2;
            s.emit(core, v);
          },
          py::arg("core"), py::arg("op"), py::arg("dst"), py::arg("src0"),
          py::arg("src1"), py::arg("src2"), py::arg("rows"), py::arg("cols"),
          py::arg("src1_is_imm") = false, py::arg("imm") = 0.0,
          py::arg("imm2") = 0.0)
      .def(
          "reduce",
          [](ProgramSpec& s, uint32_t core, rt::RedOp op, const TileTuple& dst,
             const TileTuple& src, uint32_t rows, uint32_t cols,
             bool accumulate, int64_t index_base) {
            s.emit(core, rt::Reduce{op, tile_of(dst), tile_of(src), rows, cols,
                                    accumulate, index_base});
          },
          py::arg("core"), py::arg("op"), py::arg("dst"), py::arg("src"),
          py::arg("rows"), py::arg("cols"), py::arg("accumulate") = false,
          py::arg("index_base") = 0)
      .def(
          "matmul",
          [](ProgramSpec& s, uint32_t core, const TileTuple& a,
             const TileTuple& b, const TileTuple& c, uint32_t m_, uint32_t n_,
             uint32_t k_, bool accumulate) {
            s.emit(core, rt::MatMul{tile_of(a), tile_of(b), tile_of(c), m_, n_,
                                    k_, accumulate});
          },
          py::arg("core"), py::arg("a"), py::arg("b"), py::arg("c"),
          py::arg("m"), py::arg("n"), py::arg("k"),
          py::arg("accumulate") = false)
      .def(
          "ring_send",
          [](ProgramSpec& s, uint32_t core, uint32_t channel, uint32_t dst_core,
             uint32_t spad, uint32_t bytes) {
            s.emit(core, rt::RingSend{channel, dst_core, spad, bytes});
          },
          py::arg("core"), py::arg("channel"), py::arg("dst_core"),
          py::arg("spad"), py::arg("bytes"))
      .def(
          "ring_recv",
          [](ProgramSpec& s, uint32_t core, uint32_t channel, uint32_t src_core,
             uint32_t spad, uint32_t bytes) {
            s.emit(core, rt::RingRecv{channel, src_core, spad, bytes});
          },
          py::arg("core"), py::arg("channel"), py::arg("src_core"),
          py::arg("spad"), py::arg("bytes"))
      .def(
          "validate",
          [](const ProgramSpec& s, uint32_t num_cores,
             uint32_t scratchpad_bytes) {
            rt::validate(s.program(),
                         rt::ProgramLimits{num_cores, scratchpad_bytes});
          },
          py::arg("num_cores") = 32, py::arg("scratchpad_bytes") = 2u << 20)
      .def("serialize",
           [](const ProgramSpec& s) {
             std::vector<uint8_t> bytes = rt::serialize(s.program());
             return py::bytes(reinterpret_cast<const char*>(bytes.data()),
                              bytes.size());
           })
      .def_property_readonly(
          "num_args",
          [](const ProgramSpec& s) { return s.program().args.size(); })
      .def_property_readonly(
          "num_cores",
          [](const ProgramSpec& s) { return s.program().cores.size(); })
      .def_property_readonly("instruction_count", [](const ProgramSpec& s) {
        return instruction_count(s.program());
      });

  m.def(
      "deserialize_program",
      [](const py::bytes& data, uint32_t num_cores, uint32_t scratchpad_bytes) {
        std::string_view view = data;
        return ProgramSpec(rt::deserialize(
            std::span<const uint8_t>(
                reinterpret_cast<const uint8_t*>(view.data()), view.size()),
            rt::ProgramLimits{num_cores, scratchpad_bytes}));
      },
      py::arg("data"), py::arg("num_cores") = 32,
      py::arg("scratchpad_bytes") = 2u << 20);
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
std::pair<ProgramSpec, std::string> build_matmul_program(
    const MatrixTuple& a, const MatrixTuple& b, const MatrixTuple& c,
    const std::optional<MatrixTuple>& bias, bool a_transposed,
    bool b_transposed, double alpha, double beta, const std::string& activation,
    uint32_t max_cores, bool naive) {
  kernels::MatmulShape shape(matrix_of(a), matrix_of(b), matrix_of(c));
  shape.a_transposed = a_transposed;
  shape.b_transposed = b_transposed;
  if (bias) shape.bias = matrix_of(*bias);
  shape.alpha = alpha;
  shape.beta = beta;
  shape.activation = activation_of(activation);
  kernels::MatmulOptions options;
  options.max_cores = max_cores;
  options.lowering = naive ? kernels::MatmulLowering::kNaive
                           : kernels::MatmulLowering::kPlanned;
  const kernels::MatmulPlan plan = kernels::plan_matmul(shape, options);
  return {ProgramSpec(kernels::build_matmul(shape, plan, options)),
          plan.describe()};
}

// A fused MLP (up-projection, activation, down-projection) in one program,
// by the kernel library's builder. Slots: x, w_up, w_down, y, then b_up and
// b_down when given.
std::pair<ProgramSpec, std::string> build_mlp_program(
    const MatrixTuple& x, const MatrixTuple& w_up, const MatrixTuple& w_down,
    const MatrixTuple& y, const std::optional<MatrixTuple>& b_up,
    const std::optional<MatrixTuple>& b_down, bool w_up_transposed,
    bool w_down_transposed, const std::string& activation, uint32_t max_cores) {
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
  options.max_cores = max_cores;
  const kernels::MlpPlan plan = kernels::plan_mlp(shape, options);
  return {ProgramSpec(kernels::build_mlp(shape, plan, options)),
          plan.describe()};
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
std::pair<ProgramSpec, py::dict> build_loop_kernel_program(
    const py::dict& description, c10::DeviceIndex device,
    std::optional<uint32_t> max_cores, bool double_buffer) {
  const kernels::LoopKernel kernel = loop_kernel_of(description);
  const rt::DeviceProperties& props =
      spyre::torch_glue::runtime_device(
          spyre::torch_glue::resolve_device_index(device))
          .properties();
  kernels::LoopKernelOptions options;
  options.max_cores = max_cores.value_or(0);
  options.double_buffer = double_buffer;
  kernels::LoopKernelProgram built =
      kernels::build_loop_kernel(kernel, props, options);
  const kernels::LoopKernelSummary& s = built.summary;
  py::dict summary;
  summary["cores"] = s.cores;
  summary["blocks"] = s.blocks;
  summary["rows_per_block"] = s.rows_per_block;
  summary["region_bytes"] = s.region_bytes;
  summary["double_buffered"] = s.double_buffered;
  summary["instructions"] = s.instructions;
  if (s.cross_core_reduction) summary["cross_core_reduction"] = true;
  return {ProgramSpec(std::move(built.program)), summary};
}

void bind_builders(py::module_& m) {
  m.def("build_mlp", &build_mlp_program, py::arg("x"), py::arg("w_up"),
        py::arg("w_down"), py::arg("y"), py::arg("b_up") = std::nullopt,
        py::arg("b_down") = std::nullopt, py::arg("w_up_transposed") = false,
        py::arg("w_down_transposed") = false, py::arg("activation") = "gelu",
        py::arg("max_cores") = 32);
  m.def("build_matmul", &build_matmul_program, py::arg("a"), py::arg("b"),
        py::arg("c"), py::arg("bias") = std::nullopt,
        py::arg("a_transposed") = false, py::arg("b_transposed") = false,
        py::arg("alpha") = 1.0, py::arg("beta") = 1.0,
        py::arg("activation") = "none", py::arg("max_cores") = 32,
        py::arg("naive") = false);
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
          rt::ProgramLimits{props.num_cores, props.scratchpad_bytes});
    });
  }

  void launch(const std::vector<at::Tensor>& tensors) {
    const auto& slots = program_->program().args;
    if (tensors.size() != slots.size()) {
      throw std::invalid_argument("spyre program '" + program_->program().name +
                                  "' takes " + std::to_string(slots.size()) +
                                  " tensors, got " +
                                  std::to_string(tensors.size()));
    }
    // The program assumed each storage in the default layout of its dense
    // shape. A tensor from elsewhere (an extern kernel's result, a view of
    // a larger storage) may sit in another layout: inputs are copied into
    // the assumed one (counted); outputs must already match.
    std::vector<at::Tensor> bound(tensors.begin(), tensors.end());
    for (size_t i = 0; i < bound.size(); ++i) {
      const rt::ArgSlot& slot = slots[i];
      if (slot.layout.device_size.empty() ||
          glue::allocation_of(bound[i].storage()).layout->device_size ==
              slot.layout.device_size) {
        continue;
      }
      if (slot.is_output) {
        throw std::invalid_argument(
            "spyre program '" + program_->program().name + "': output '" +
            slot.name +
            "' is not in the device layout the kernel was built for");
      }
      at::Tensor copy = at::empty_strided(bound[i].sizes(), bound[i].strides(),
                                          bound[i].options());
      copy.copy_(bound[i]);
      bound[i] = copy;
      ++relayouts_;
    }
    glue::ops::launch(*program_, bound);
    ++launches_;
  }

  uint64_t launches() const { return launches_; }
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
  bind_enums(m);
  bind_spec(m);
  bind_builders(m);
  bind_compiled(m);
  auto& build_error = py::register_exception<kernels::KernelBuildError>(
      m, "KernelBuildError", PyExc_RuntimeError);
  // registered later, so tried first: a subclass of KernelBuildError
  py::register_exception<kernels::LoopKernelTooLarge>(m, "LoopKernelTooLarge",
                                                      build_error.ptr());
}

}  // namespace spyre::torch_glue
