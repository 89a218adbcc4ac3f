// Elementwise operators as device programs: PyTorch's TensorIterator decides
// shapes, type promotion, output allocation and overlap checks; the kernel is
// a short list of vector steps (kernels/elementwise.h) computed in fp32 for
// floating types (int64 for integers) and rounded once to the result dtype.
// Dtypes the device cannot compute go to the counted CPU fallback.
#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/result_type.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ops/elementwise_steps.h"
#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

using kernels::ElementwiseStep;
using rt::VecOp;

// ---- the other elementwise operators: one boxed kernel ---------------------
//
// Every functional, in-place (name_) and out= form of the operators in
// family_of() goes through elementwise_kernel: Scalars become wrapped CPU
// scalars (so TensorIterator promotes them as PyTorch does), TensorIterator
// checks and allocates, and the family's steps run on the device. Anything
// the device cannot compute goes, unchanged, to the counted CPU fallback.

enum class Promotion : uint8_t {
  kArith,    // binary_op: common dtype, cast to out, safe casting
  kFloat,    // as kArith, integers promoted to the default float
  kCompare,  // common dtype for the comparison, bool result
  kSame,     // unary ops keeping the dtype (abs, neg, floor, relu)
  kLogical,  // no promotion, bool result
  kWhere,    // result_type(self, other); cond bool
  kMasked,   // masked_fill_: self's dtype, mask bool
  kBitwise,  // common dtype, kept; bool only on the device (logical ops)
};

enum class Shape : uint8_t {
  kUnary,
  kBinary,
  kGelu,
  kClamp,  // (self, min?, max?)
  kClampMin,
  kClampMax,
  kWhere,       // (cond, self, other)
  kMaskedFill,  // (self, mask, value)
  kTest,        // bool result of op(x, imm), or of op(x, x) for isnan
  // Functions with no vector op of their own: one named step each, which
  // the kernel library expands (formulas.h, loop_kernel_emit.cpp).
  kNamed,     // Family::named of (self)
  kSoftplus,  // (self, beta, threshold)
};

struct Family {
  Promotion promotion;
  Shape shape;
  VecOp op = VecOp::kCopy;
  bool floating_only = false;  // integer inputs go to the CPU fallback
  double imm = 0;              // kTest's comparand
  bool integer_only = false;   // floating inputs go to the CPU fallback
  // kNamed: the step kind (log1p, expm1, acos, erfinv)
  kernels::ElementwiseStep::Kind named =
      kernels::ElementwiseStep::Kind::kVector;
};

// A function the kernel library expands from one named step.
Family named_family(kernels::ElementwiseStep::Kind kind) {
  Family family{Promotion::kFloat, Shape::kNamed};
  family.named = kind;
  return family;
}

// A rounding function of floating values, keeping the dtype (on integers,
// which it would leave as they are, the CPU's).
Family rounding_family(kernels::ElementwiseStep::Kind kind) {
  Family family{Promotion::kSame, Shape::kNamed};
  family.named = kind;
  family.floating_only = true;
  return family;
}

const Family* family_of(std::string_view name) {
  static const std::unordered_map<std::string_view, Family> families = {
      {"mul", {Promotion::kArith, Shape::kBinary, VecOp::kMul}},
      {"div", {Promotion::kFloat, Shape::kBinary, VecOp::kDiv}},
      {"maximum", {Promotion::kArith, Shape::kBinary, VecOp::kMax}},
      {"minimum", {Promotion::kArith, Shape::kBinary, VecOp::kMin}},
      {"remainder", {Promotion::kArith, Shape::kBinary, VecOp::kRemainder}},
      // Integer division rounds toward -inf on the device, as floor_divide
      // does (mixture-of-experts routing: token = pair // top_k). Floating
      // floor_divide rounds the CPU's own way (fmod based): the CPU's.
      {"floor_divide",
       {Promotion::kArith, Shape::kBinary, VecOp::kDiv, false, 0, true}},
      {"pow", {Promotion::kArith, Shape::kBinary, VecOp::kPow}},
      {"eq", {Promotion::kCompare, Shape::kBinary, VecOp::kEq}},
      {"ne", {Promotion::kCompare, Shape::kBinary, VecOp::kNe}},
      {"lt", {Promotion::kCompare, Shape::kBinary, VecOp::kLt}},
      {"le", {Promotion::kCompare, Shape::kBinary, VecOp::kLe}},
      {"gt", {Promotion::kCompare, Shape::kBinary, VecOp::kGt}},
      {"ge", {Promotion::kCompare, Shape::kBinary, VecOp::kGe}},
      {"logical_and",
       {Promotion::kLogical, Shape::kBinary, VecOp::kLogicalAnd}},
      {"logical_or", {Promotion::kLogical, Shape::kBinary, VecOp::kLogicalOr}},
      {"logical_not", {Promotion::kLogical, Shape::kUnary, VecOp::kLogicalNot}},
      {"exp", {Promotion::kFloat, Shape::kUnary, VecOp::kExp}},
      {"log", {Promotion::kFloat, Shape::kUnary, VecOp::kLog}},
      {"sqrt", {Promotion::kFloat, Shape::kUnary, VecOp::kSqrt}},
      {"rsqrt", {Promotion::kFloat, Shape::kUnary, VecOp::kRsqrt}},
      {"tanh", {Promotion::kFloat, Shape::kUnary, VecOp::kTanh}},
      {"sigmoid", {Promotion::kFloat, Shape::kUnary, VecOp::kSigmoid}},
      {"reciprocal", {Promotion::kFloat, Shape::kUnary, VecOp::kRecip}},
      {"erf", {Promotion::kFloat, Shape::kUnary, VecOp::kErf}},
      {"log1p", named_family(kernels::ElementwiseStep::Kind::kLog1p)},
      {"expm1", named_family(kernels::ElementwiseStep::Kind::kExpm1)},
      {"softplus", {Promotion::kFloat, Shape::kSoftplus, VecOp::kCopy, true}},
      {"acos", named_family(kernels::ElementwiseStep::Kind::kAcos)},
      {"erfinv", named_family(kernels::ElementwiseStep::Kind::kErfinv)},
      {"sin", {Promotion::kFloat, Shape::kUnary, VecOp::kSin}},
      {"cos", {Promotion::kFloat, Shape::kUnary, VecOp::kCos}},
      {"gelu", {Promotion::kFloat, Shape::kGelu, VecOp::kGelu, true}},
      {"silu", {Promotion::kFloat, Shape::kUnary, VecOp::kSilu, true}},
      {"abs", {Promotion::kSame, Shape::kUnary, VecOp::kAbs}},
      {"neg", {Promotion::kSame, Shape::kUnary, VecOp::kNeg}},
      {"floor", {Promotion::kSame, Shape::kUnary, VecOp::kFloor}},
      {"ceil", rounding_family(kernels::ElementwiseStep::Kind::kCeil)},
      {"trunc", rounding_family(kernels::ElementwiseStep::Kind::kTrunc)},
      {"round", rounding_family(kernels::ElementwiseStep::Kind::kRound)},
      {"frac", rounding_family(kernels::ElementwiseStep::Kind::kFrac)},
      {"relu", {Promotion::kSame, Shape::kUnary, VecOp::kRelu}},
      {"clamp", {Promotion::kArith, Shape::kClamp}},
      {"clamp_min", {Promotion::kArith, Shape::kClampMin}},
      {"clamp_max", {Promotion::kArith, Shape::kClampMax}},
      {"where", {Promotion::kWhere, Shape::kWhere, VecOp::kSelect}},
      {"masked_fill", {Promotion::kMasked, Shape::kMaskedFill}},
      // Listed by their bool forms (attention and generation masks);
      // integer tensors take the bit-pattern ops (integer_bitwise).
      {"bitwise_and",
       {Promotion::kBitwise, Shape::kBinary, VecOp::kLogicalAnd}},
      {"bitwise_or", {Promotion::kBitwise, Shape::kBinary, VecOp::kLogicalOr}},
      {"bitwise_xor", {Promotion::kBitwise, Shape::kBinary, VecOp::kNe}},
      {"bitwise_not", {Promotion::kBitwise, Shape::kUnary, VecOp::kLogicalNot}},
      // Floating classification (the safe softmax of scaled-dot-product
      // attention tests isneginf); isinf is abs and eq, already here.
      {"isneginf",
       {Promotion::kLogical, Shape::kTest, VecOp::kEq, true, -INFINITY}},
      {"isposinf",
       {Promotion::kLogical, Shape::kTest, VecOp::kEq, true, INFINITY}},
      {"isnan", {Promotion::kLogical, Shape::kTest, VecOp::kNe, true}},
  };
  auto it = families.find(name);
  return it == families.end() ? nullptr : &it->second;
}

// The arguments of one call, read from the stack without popping it.
struct Call {
  std::vector<at::Tensor> inputs;  // schema order; undefined for None
  at::Tensor out;                  // out= or self (in place); else undefined
  bool in_place = false;
  std::string approximate = "none";
};

Call read_call(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const size_t count = schema.arguments().size();
  auto args = torch::jit::last(*stack, count);
  Call call;
  for (size_t i = 0; i < count; ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const c10::IValue& value = args[i];
    if (arg.is_out()) {
      call.out = value.toTensor();
    } else if (arg.name() == "approximate") {
      call.approximate = value.toStringRef();
    } else if (value.isTensor()) {
      call.inputs.push_back(value.toTensor());
    } else if (value.isScalar()) {
      call.inputs.push_back(
          at::native::wrapped_scalar_tensor(value.toScalar()));
    } else {
      call.inputs.emplace_back();  // None
    }
  }
  const std::string& name = schema.name();
  call.in_place = !name.empty() && name.back() == '_';
  if (call.in_place) call.out = call.inputs.at(0);
  return call;
}

bool on_device(const at::Tensor& t) {
  return !t.defined() || (t.is_cpu() && t.dim() == 0) ||
         (t.is_privateuseone() && has_device_dtype(t.scalar_type()));
}

// The dtype PyTorch computes the call in (scalars promote as wrapped
// numbers), and the dtype of a freshly allocated result.
at::ScalarType common_dtype(const Family& family, const Call& call) {
  auto promote = [](c10::ArrayRef<at::Tensor> tensors) {
    at::native::ResultTypeState state;
    for (const at::Tensor& t : tensors) {
      if (t.defined()) state = at::native::update_result_type_state(t, state);
    }
    return at::native::result_type(state);
  };
  switch (family.promotion) {
    case Promotion::kArith:
    case Promotion::kCompare:
    case Promotion::kBitwise:
      return promote(call.inputs);
    case Promotion::kFloat: {
      const at::ScalarType common = promote(call.inputs);
      return at::isIntegralType(common, /*includeBool=*/true)
                 ? at::typeMetaToScalarType(at::get_default_dtype())
                 : common;
    }
    case Promotion::kWhere:
      return promote({call.inputs[1], call.inputs[2]});
    default:
      return call.inputs[0].scalar_type();
  }
}

at::ScalarType result_dtype(const Family& family, at::ScalarType common) {
  const bool boolean = family.promotion == Promotion::kCompare ||
                       family.promotion == Promotion::kLogical;
  return boolean ? at::kBool : common;
}

// Shapes, output allocation or resizing, and overlap checks as PyTorch's
// TensorIterator does them; CPU scalars take no part (they broadcast).
void prepare_output(const Family& family, const Call& call,
                    at::ScalarType common, at::Tensor& out) {
  const bool allocated_here = !out.defined();
  if (allocated_here) {
    const at::Tensor* like = &call.inputs[0];
    for (const at::Tensor& t : call.inputs) {
      if (t.defined() && t.is_privateuseone()) like = &t;
    }
    out = at::empty({0}, like->options().dtype(result_dtype(family, common)));
  }
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true)
      .check_all_same_dtype(false)
      .resize_outputs(!call.in_place)
      .add_output(out);
  for (const at::Tensor& input : call.inputs) {
    if (input.defined() && !(input.is_cpu() && input.dim() == 0)) {
      config.add_const_input(input);
    }
  }
  config.build();
  // TensorIterator gives an output the memory order of its inputs (a
  // permuted view in, a permuted result out) by restriding a storage it
  // sized as contiguous. Its device layout would then run the sticks along
  // the wrong dim; a storage of the result's own memory order keeps every
  // kernel reading and writing it on the device.
  if (allocated_here && !out.is_contiguous()) {
    out = at::empty_strided(out.sizes(), out.strides(), out.options());
  }
  if (family.promotion == Promotion::kArith ||
      family.promotion == Promotion::kFloat ||
      family.promotion == Promotion::kWhere ||
      family.promotion == Promotion::kBitwise) {
    TORCH_CHECK(at::canCast(common, out.scalar_type()), "result type ", common,
                " can't be cast to the desired output type ",
                out.scalar_type());
  }
  if (family.promotion == Promotion::kSame) {
    TORCH_CHECK(out.scalar_type() == common,
                "Expected out tensor to have dtype ", common, ", but got ",
                out.scalar_type(), " instead");
  }
}

void check_arguments(const Family& family, const Call& call) {
  if (family.shape == Shape::kClamp) {
    TORCH_CHECK(call.inputs[1].defined() || call.inputs[2].defined(),
                "torch.clamp: At least one of 'min' or 'max' must not be "
                "None");
  }
  if (family.shape == Shape::kWhere) {
    TORCH_CHECK(call.inputs[0].scalar_type() == at::kBool,
                "where expected condition to be a boolean tensor, but got a "
                "tensor with dtype ",
                call.inputs[0].scalar_type());
  }
  if (family.shape == Shape::kMaskedFill) {
    TORCH_CHECK(call.inputs[1].scalar_type() == at::kBool,
                "masked_fill_ only supports boolean masks, but got mask with "
                "dtype ",
                call.inputs[1].scalar_type());
    TORCH_CHECK(call.inputs[2].dim() == 0,
                "masked_fill_ only supports a 0-dimensional value tensor, but "
                "got tensor with ",
                call.inputs[2].dim(), " dimension(s).");
  }
}

// Scalar clamp bounds convert to an integer common dtype with PyTorch's
// overflow check, as its CPU kernel converts them: uint8 takes -5 (as 251)
// but not 300 or -300. Other scalars wrap (compute_scalar).
void check_clamp_bounds(const Family& family, const Call& call,
                        at::ScalarType common) {
  const bool clamp = family.shape == Shape::kClamp ||
                     family.shape == Shape::kClampMin ||
                     family.shape == Shape::kClampMax;
  if (!clamp || !at::isIntegralType(common, /*includeBool=*/false)) return;
  for (size_t i = 1; i < call.inputs.size(); ++i) {
    const at::Tensor& bound = call.inputs[i];
    if (!bound.defined() || !bound.unsafeGetTensorImpl()->is_wrapped_number())
      continue;
    AT_DISPATCH_INTEGRAL_TYPES(common, "spyre_clamp_bound", [&] {
      (void)bound.item().to<scalar_t>();  // raises on overflow
    });
  }
}

// On bool operands mul, minimum and maximum are logical and, and, or (as
// PyTorch computes them; masks are multiplied, e.g. in isfinite).
std::optional<VecOp> bool_logic(VecOp op) {
  switch (op) {
    case VecOp::kMul:
    case VecOp::kMin:
      return VecOp::kLogicalAnd;
    case VecOp::kMax:
      return VecOp::kLogicalOr;
    default:
      return std::nullopt;
  }
}

// The bit-pattern form of a bitwise family's bool op, for integer tensors.
VecOp integer_bitwise(VecOp op) {
  switch (op) {
    case VecOp::kLogicalAnd:
      return VecOp::kBitAnd;
    case VecOp::kLogicalOr:
      return VecOp::kBitOr;
    case VecOp::kNe:
      return VecOp::kBitXor;
    default:
      return VecOp::kBitNot;
  }
}

// The op a family runs for operands of `common`.
VecOp family_op(const Family& family, at::ScalarType common) {
  const bool bit_patterns =
      family.promotion == Promotion::kBitwise && common != at::kBool;
  return bit_patterns ? integer_bitwise(family.op) : family.op;
}

// Whether the device runs the call in `common` (else the CPU fallback).
bool device_computes(const Family& family, const Call& call,
                     at::ScalarType common) {
  if (!has_device_dtype(common)) return false;
  const bool arithmetic = family.promotion == Promotion::kArith ||
                          family.promotion == Promotion::kFloat ||
                          family.promotion == Promotion::kSame;
  if (arithmetic && common == at::kBool && !bool_logic(family.op)) {
    return false;
  }
  if (family.promotion == Promotion::kBitwise &&
      !at::isIntegralType(common, /*includeBool=*/true)) {
    return false;  // the CPU raises PyTorch's error for floating operands
  }
  if (family.floating_only && !at::isFloatingType(common)) return false;
  if (family.integer_only && !at::isIntegralType(common, false)) return false;
  // Integer powers with a negative scalar exponent raise on the CPU.
  if (family.op == VecOp::kPow && !at::isFloatingType(common) &&
      call.inputs[1].is_cpu() && call.inputs[1].item<double>() < 0) {
    return false;
  }
  return true;
}

void build_steps(const Family& family, const Call& call, Operands& ops) {
  ops.scalars_unrounded =
      family.shape == Shape::kBinary &&
      (family.op == VecOp::kMul || family.op == VecOp::kDiv);
  std::vector<Operands::Value> v;
  for (const at::Tensor& input : call.inputs) {
    v.push_back(input.defined() ? ops.add(input) : Operands::Value{-2, 0});
  }
  const rt::DType dtype = compute_dtype(ops.common);
  const VecOp op = family_op(family, ops.common);
  switch (family.shape) {
    case Shape::kUnary:
      ops.push(kernels::unary_step(op, ops.materialized(v[0]), dtype));
      return;
    case Shape::kGelu:
      TORCH_CHECK_VALUE(
          call.approximate == "none" || call.approximate == "tanh",
          "approximate argument must be either none or tanh.");
      ops.push(kernels::unary_step(
          call.approximate == "tanh" ? VecOp::kGeluTanh : VecOp::kGelu,
          ops.materialized(v[0]), dtype));
      return;
    case Shape::kBinary:
      if (ops.common == at::kBool && family.promotion == Promotion::kArith) {
        ops.binary(*bool_logic(family.op), v[0], v[1], rt::DType::kBool);
        return;
      }
      ops.binary(op, v[0], v[1],
                 ops.result == at::kBool ? rt::DType::kBool : dtype);
      return;
    case Shape::kClampMin:
      ops.binary(VecOp::kMax, v[0], v[1]);
      return;
    case Shape::kClampMax:
      ops.binary(VecOp::kMin, v[0], v[1]);
      return;
    case Shape::kClamp: {
      Operands::Value x = v[0];
      if (v[1].id != -2) x = {ops.binary(VecOp::kMax, x, v[1]), 0};
      if (v[2].id != -2) ops.binary(VecOp::kMin, x, v[2]);
      return;
    }
    case Shape::kWhere:
      ops.push(kernels::select_step(ops.materialized(v[0]),
                                    ops.materialized(v[1]),
                                    ops.materialized(v[2]), dtype));
      return;
    case Shape::kMaskedFill:
      ops.push(kernels::select_step(ops.materialized(v[1]),
                                    ops.materialized(v[2]),
                                    ops.materialized(v[0]), dtype));
      return;
    case Shape::kTest:
      ops.binary(
          family.op, v[0],
          family.op == VecOp::kNe ? v[0] : Operands::Value{-1, family.imm},
          rt::DType::kBool);
      return;
    case Shape::kNamed:
      ops.push(
          kernels::named_step(family.named, ops.materialized(v[0]), dtype));
      return;
    case Shape::kSoftplus:
      ops.push(kernels::named_step(
          kernels::ElementwiseStep::Kind::kSoftplus, ops.materialized(v[0]),
          dtype, compute_parameter(call.inputs[1].item(), ops.common),
          compute_parameter(call.inputs[2].item(), ops.common)));
      return;
  }
}

void elementwise_kernel(const c10::OperatorHandle& handle,
                        torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = handle.schema();
  std::string_view name = schema.name();
  name.remove_prefix(name.find("::") + 2);
  if (!name.empty() && name.back() == '_') name.remove_suffix(1);
  const Family* family = family_of(name);
  TORCH_INTERNAL_ASSERT(family != nullptr, "spyre: no elementwise family for ",
                        schema.name());
  Call call = read_call(schema, stack);
  const bool device_ok =
      std::all_of(call.inputs.begin(), call.inputs.end(), on_device) &&
      on_device(call.out) &&
      (call.out.defined()
           ? call.out.is_privateuseone()
           : call.inputs[0].is_privateuseone() || call.inputs.size() > 1);
  if (!device_ok) return cpu_fallback(handle, stack);
  check_arguments(*family, call);
  const at::ScalarType common = common_dtype(*family, call);
  check_clamp_bounds(*family, call, common);
  if (!device_computes(*family, call, common)) {
    return cpu_fallback(handle, stack);
  }
  at::Tensor out = call.out;
  prepare_output(*family, call, common, out);
  if (!has_device_dtype(out.scalar_type())) return cpu_fallback(handle, stack);
  Operands ops;
  ops.common = common;
  if (family->promotion == Promotion::kCompare ||
      (family->promotion == Promotion::kBitwise && common == at::kBool) ||
      family->shape == Shape::kTest) {
    ops.result = at::kBool;
  }
  build_steps(*family, call, ops);
  run_steps(std::string(name).c_str(), ops, out);
  torch::jit::drop(*stack, schema.arguments().size());
  torch::jit::push(*stack, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  auto boxed = [] {
    return torch::CppFunction::makeFromBoxedFunction<&elementwise_kernel>();
  };
  for (const char* name :
       {// binary arithmetic and comparisons
        "mul.Tensor", "mul_.Tensor", "mul.out", "div.Tensor", "div_.Tensor",
        "div.out", "maximum", "maximum.out", "minimum", "minimum.out",
        "remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out",
        "floor_divide", "floor_divide_.Tensor", "floor_divide.out",
        "floor_divide.Scalar", "floor_divide_.Scalar",
        "floor_divide.Scalar_out", "pow.Tensor_Tensor", "pow_.Tensor",
        "pow.Tensor_Tensor_out", "pow.Tensor_Scalar", "pow_.Scalar",
        "pow.Tensor_Scalar_out", "pow.Scalar", "pow.Scalar_out", "eq.Tensor",
        "eq_.Tensor", "eq.Tensor_out", "eq.Scalar", "eq_.Scalar",
        "eq.Scalar_out", "ne.Tensor", "ne_.Tensor", "ne.Tensor_out",
        "ne.Scalar", "ne_.Scalar", "ne.Scalar_out", "lt.Tensor", "lt_.Tensor",
        "lt.Tensor_out", "lt.Scalar", "lt_.Scalar", "lt.Scalar_out",
        "le.Tensor", "le_.Tensor", "le.Tensor_out", "le.Scalar", "le_.Scalar",
        "le.Scalar_out", "gt.Tensor", "gt_.Tensor", "gt.Tensor_out",
        "gt.Scalar", "gt_.Scalar", "gt.Scalar_out", "ge.Tensor", "ge_.Tensor",
        "ge.Tensor_out", "ge.Scalar", "ge_.Scalar", "ge.Scalar_out",
        "logical_and.out", "logical_and_", "logical_or.out", "logical_or_",
        "logical_not.out", "logical_not_",
        // unary math
        "exp", "exp_", "exp.out", "log", "log_", "log.out", "sqrt", "sqrt_",
        "sqrt.out", "rsqrt", "rsqrt_", "rsqrt.out", "tanh", "tanh_", "tanh.out",
        "sigmoid", "sigmoid_", "sigmoid.out", "reciprocal", "reciprocal_",
        "reciprocal.out", "erf", "erf_", "erf.out", "log1p", "log1p_",
        "log1p.out", "expm1", "expm1_", "expm1.out", "softplus", "softplus.out",
        "acos", "acos_", "acos.out", "erfinv", "erfinv_", "erfinv.out", "sin",
        "sin_", "sin.out", "cos", "cos_", "cos.out", "gelu", "gelu_",
        "gelu.out", "silu", "silu_", "silu.out", "abs", "abs_", "abs.out",
        "neg", "neg_", "neg.out", "floor", "floor_", "floor.out", "ceil",
        "ceil_", "ceil.out", "trunc", "trunc_", "trunc.out", "round", "round_",
        "round.out", "frac", "frac_", "frac.out", "relu", "relu_",
        // clamp, where, masked_fill
        "clamp", "clamp_", "clamp.out", "clamp.Tensor", "clamp_.Tensor",
        "clamp.Tensor_out", "clamp_min", "clamp_min_", "clamp_min.out",
        "clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out",
        "clamp_max", "clamp_max_", "clamp_max.out", "clamp_max.Tensor",
        "clamp_max_.Tensor", "clamp_max.Tensor_out", "where.self",
        "where.self_out", "masked_fill_.Scalar", "masked_fill_.Tensor",
        // masks
        "bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out",
        "bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out",
        "bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out",
        "bitwise_not", "bitwise_not_", "bitwise_not.out", "isneginf",
        "isneginf.out", "isposinf", "isposinf.out", "isnan"}) {
    m.impl(name, boxed());
  }
}

}  // namespace spyre::torch_glue::ops
