// The vector unit: elementwise ops over a rows x cols iteration space.
//
// Each row is processed in chunks: sources are converted into contiguous
// fp32 (or int64) buffers, the op runs over the buffers, and the result is
// rounded once into dst's dtype. Contiguous rows convert with vectorised
// loops; the op loops are written in blocks of 8 so GCC's SLP vectoriser
// turns them into AVX2 code even at -O2 (whose cost model skips loops that
// need a scalar epilogue).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels.h"
#include "kernels_util.h"
#include "vector_ops.h"

namespace spyre::sim {
namespace {

using rt::VecOp;

constexpr uint32_t kChunk = 256;

// f(i) for i in [0, n): full blocks of 8 unrolled for SLP vectorisation.
template <typename F>
[[gnu::always_inline]] inline void for_each_index(uint32_t n, F f) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 8
    for (uint32_t j = 0; j < 8; ++j) f(i + j);
  }
  for (; i < n; ++i) f(i);
}

// One op over whole buffers. Kept out of line on purpose: GCC honours the
// __restrict parameters (and so vectorises) only in a real function body.
template <typename T, typename F>
[[gnu::noinline]] void map_unary(const T* __restrict a, T* __restrict out,
                                 uint32_t n, F f) {
  for_each_index(n, [&](uint32_t i) { out[i] = f(a[i]); });
}

template <typename T, typename F>
[[gnu::noinline]] void map_binary(const T* __restrict a, const T* __restrict b,
                                  T* __restrict out, uint32_t n, F f) {
  for_each_index(n, [&](uint32_t i) { out[i] = f(a[i], b[i]); });
}

// Both sides are loaded unconditionally before the select. Written as
// `cond[i] != 0 ? b[i] : c[i]`, the source reads only the taken side, so
// GCC 12.2's if-conversion turns the loads into masked loads
// (vmaskmovps / vpmaskmovq) and -O3's loop vectoriser then miscompiles the
// unrolled blocks of for_each_index: lanes get the wrong mask and read back
// the zeros of a masked-off load (~44% of elements wrong; -O2 and
// -fno-tree-loop-vectorize are correct). This is a compiler bug, not an
// aliasing or NaN problem: the buffers are distinct ChunkBuffers members
// and the n elements read are all initialised. Both buffers are always
// valid for n elements, so the unconditional loads are safe and GCC emits
// plain loads plus a blend, which it vectorises correctly at -O2 and -O3.
template <typename T>
[[gnu::noinline]] void map_select(const float* __restrict cond,
                                  const T* __restrict b, const T* __restrict c,
                                  T* __restrict out, uint32_t n) {
  for_each_index(n, [&](uint32_t i) {
    const T taken = b[i];
    const T not_taken = c[i];
    out[i] = cond[i] != 0.0f ? taken : not_taken;
  });
}

// Ops whose result is floating even for integer inputs (as in PyTorch).
bool is_float_only(VecOp op) {
  return is_transcendental_unary(op) || is_root_or_reciprocal(op);
}

bool is_integral_value(double v) {
  return std::isfinite(v) && std::trunc(v) == v && std::fabs(v) < 9.2e18;
}

// Floating inputs compute in fp32, integer inputs in int64. Compares,
// logical ops and select take the domain from their value inputs only (their
// dst is a 0/1 or a pass-through); other ops also follow a floating dst.
bool computes_in_float(const rt::Vector& v) {
  if (is_float_only(v.op)) return true;
  if (rt::vec_op_is_bitwise(v.op)) return false;  // validated: no floats
  int n = rt::vec_op_arity(v.op);
  bool value_dst = !rt::vec_op_is_compare(v.op) && v.op != VecOp::kLogicalNot &&
                   v.op != VecOp::kLogicalAnd && v.op != VecOp::kLogicalOr &&
                   v.op != VecOp::kSelect;
  if (value_dst && rt::is_floating(v.dst.dtype)) return true;
  if (v.op == VecOp::kSelect) {
    return rt::is_floating(v.src1.dtype) || rt::is_floating(v.src2.dtype);
  }
  if (n >= 1 && rt::is_floating(v.src0.dtype)) return true;
  if (n == 2) {
    if (v.src1_is_imm) return !is_integral_value(v.imm);
    return rt::is_floating(v.src1.dtype);
  }
  if (n == 0) return !is_integral_value(v.imm) || !is_integral_value(v.imm2);
  return false;
}

// ---- fp32 domain -----------------------------------------------------------

struct FloatArgs {
  const float* a;
  const float* b;
  float* out;
  uint32_t n;
};

float gelu_erf(float x) {
  return x * 0.5f * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2)));
}

float gelu_tanh(float x) {
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  constexpr float kKappa = 0.044715f;
  float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

// Python's sign rule: a nonzero result takes the divisor's sign.
float remainder_float(float a, float b) {
  float mod = std::fmod(a, b);
  if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) mod += b;
  return mod;
}

void unary_float(VecOp op, const FloatArgs& x) {
  auto map = [&](auto f) { map_unary(x.a, x.out, x.n, f); };
  switch (op) {
    case VecOp::kCopy:
      map([](float v) { return v; });
      return;
    case VecOp::kNeg:
      map([](float v) { return -v; });
      return;
    case VecOp::kAbs:
      map([](float v) { return std::fabs(v); });
      return;
    case VecOp::kExp:
      map([](float v) { return std::exp(v); });
      return;
    case VecOp::kLog:
      map([](float v) { return std::log(v); });
      return;
    case VecOp::kSqrt:
      map([](float v) { return std::sqrt(v); });
      return;
    case VecOp::kRsqrt:
      map([](float v) { return 1.0f / std::sqrt(v); });
      return;
    case VecOp::kRecip:
      map([](float v) { return 1.0f / v; });
      return;
    case VecOp::kTanh:
      map([](float v) { return std::tanh(v); });
      return;
    case VecOp::kSigmoid:
      map([](float v) { return 1.0f / (1.0f + std::exp(-v)); });
      return;
    case VecOp::kRelu:  // NaN passes through, as torch.relu does
      map([](float v) { return v > 0.0f || v != v ? v : 0.0f; });
      return;
    case VecOp::kGelu:
      map(gelu_erf);
      return;
    case VecOp::kGeluTanh:
      map(gelu_tanh);
      return;
    case VecOp::kSilu:
      map([](float v) { return v / (1.0f + std::exp(-v)); });
      return;
    case VecOp::kErf:
      map([](float v) { return std::erf(v); });
      return;
    case VecOp::kSin:
      map([](float v) { return std::sin(v); });
      return;
    case VecOp::kCos:
      map([](float v) { return std::cos(v); });
      return;
    case VecOp::kLogicalNot:
      map([](float v) { return v == 0.0f ? 1.0f : 0.0f; });
      return;
    case VecOp::kFloor:
      map([](float v) { return std::floor(v); });
      return;
    default:
      device_error(
          rt::str("vector: op ", static_cast<int>(op), " is not unary"));
  }
}

void binary_float(VecOp op, const FloatArgs& x) {
  auto map = [&](auto f) { map_binary(x.a, x.b, x.out, x.n, f); };
  auto flag = [](bool v) { return v ? 1.0f : 0.0f; };
  switch (op) {
    case VecOp::kAdd:
      map([](float p, float q) { return p + q; });
      return;
    case VecOp::kSub:
      map([](float p, float q) { return p - q; });
      return;
    case VecOp::kMul:
      map([](float p, float q) { return p * q; });
      return;
    case VecOp::kDiv:
      map([](float p, float q) { return p / q; });
      return;
    case VecOp::kMax:  // NaN in either input propagates (torch.maximum)
      map([](float p, float q) { return p > q || p != p ? p : q; });
      return;
    case VecOp::kMin:
      map([](float p, float q) { return p < q || p != p ? p : q; });
      return;
    case VecOp::kPow:
      map([](float p, float q) { return std::pow(p, q); });
      return;
    case VecOp::kEq:
      map([&](float p, float q) { return flag(p == q); });
      return;
    case VecOp::kNe:
      map([&](float p, float q) { return flag(p != q); });
      return;
    case VecOp::kLt:
      map([&](float p, float q) { return flag(p < q); });
      return;
    case VecOp::kLe:
      map([&](float p, float q) { return flag(p <= q); });
      return;
    case VecOp::kGt:
      map([&](float p, float q) { return flag(p > q); });
      return;
    case VecOp::kGe:
      map([&](float p, float q) { return flag(p >= q); });
      return;
    case VecOp::kLogicalAnd:
      map([&](float p, float q) { return flag(p != 0.0f && q != 0.0f); });
      return;
    case VecOp::kLogicalOr:
      map([&](float p, float q) { return flag(p != 0.0f || q != 0.0f); });
      return;
    case VecOp::kRemainder:
      map(remainder_float);
      return;
    default:
      device_error(
          rt::str("vector: op ", static_cast<int>(op), " is not binary"));
  }
}

// x ** e for the scalar exponents PyTorch's CPU pow computes in exact
// forms for fp32 and bf16 (its results are the reference; fp16 takes powf
// there too): a square is one product, not powf's logarithm and
// exponential, and a half power is sqrt (so (-inf) ** 0.5 is NaN, as on
// the CPU, where powf gives inf). False for any other exponent.
bool pow_by_exact_form(float e, const FloatArgs& x) {
  auto map = [&](auto f) {
    map_unary(x.a, x.out, x.n, f);
    return true;
  };
  if (e == 2.0f) return map([](float p) { return p * p; });
  if (e == 3.0f) return map([](float p) { return p * p * p; });
  if (e == -2.0f) return map([](float p) { return 1.0f / (p * p); });
  if (e == 0.5f) return map([](float p) { return std::sqrt(p); });
  if (e == -0.5f) return map([](float p) { return 1.0f / std::sqrt(p); });
  if (e == -1.0f) return map([](float p) { return 1.0f / p; });
  return false;
}

// ---- int64 domain ----------------------------------------------------------

struct IntArgs {
  const int64_t* a;
  const int64_t* b;
  int64_t* out;
  uint32_t n;
};

// Two's complement wrap-around without signed-overflow UB.
int64_t wrap_add(int64_t p, int64_t q) {
  return static_cast<int64_t>(static_cast<uint64_t>(p) +
                              static_cast<uint64_t>(q));
}
int64_t wrap_sub(int64_t p, int64_t q) {
  return static_cast<int64_t>(static_cast<uint64_t>(p) -
                              static_cast<uint64_t>(q));
}
int64_t wrap_mul(int64_t p, int64_t q) {
  return static_cast<int64_t>(static_cast<uint64_t>(p) *
                              static_cast<uint64_t>(q));
}

void check_divisor(int64_t q, const char* what) {
  if (q == 0)
    device_error(rt::str("vector ", what, ": integer division by zero"));
}

// Floor division, Python's `//`: pairs with remainder_int so that
// p == floor_div(p, q) * q + remainder_int(p, q).
int64_t floor_div(int64_t p, int64_t q) {
  check_divisor(q, "div");
  if (q == -1) return wrap_sub(0, p);  // INT64_MIN / -1 wraps
  int64_t quot = p / q;
  if ((p % q != 0) && ((p < 0) != (q < 0))) --quot;
  return quot;
}

int64_t remainder_int(int64_t p, int64_t q) {
  check_divisor(q, "remainder");
  if (q == -1) return 0;
  int64_t mod = p % q;
  if (mod != 0 && ((mod < 0) != (q < 0))) mod += q;
  return mod;
}

// Integer power by squaring; negative exponents give the truncated real
// result (0 unless the base is 1 or -1).
int64_t pow_int(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp >>= 1;
  }
  return result;
}

void unary_int(VecOp op, const IntArgs& x) {
  auto map = [&](auto f) { map_unary(x.a, x.out, x.n, f); };
  switch (op) {
    case VecOp::kCopy:
    case VecOp::kFloor:
      map([](int64_t v) { return v; });
      return;
    case VecOp::kNeg:
      map([](int64_t v) { return wrap_sub(0, v); });
      return;
    case VecOp::kAbs:
      map([](int64_t v) { return v < 0 ? wrap_sub(0, v) : v; });
      return;
    case VecOp::kRelu:
      map([](int64_t v) { return v > 0 ? v : int64_t{0}; });
      return;
    case VecOp::kLogicalNot:
      map([](int64_t v) { return int64_t{v == 0}; });
      return;
    case VecOp::kBitNot:
      map([](int64_t v) { return ~v; });
      return;
    default:
      device_error(
          rt::str("vector: op ", static_cast<int>(op), " has no integer form"));
  }
}

void binary_int(VecOp op, const IntArgs& x) {
  auto map = [&](auto f) { map_binary(x.a, x.b, x.out, x.n, f); };
  switch (op) {
    case VecOp::kAdd:
      map(wrap_add);
      return;
    case VecOp::kSub:
      map(wrap_sub);
      return;
    case VecOp::kMul:
      map(wrap_mul);
      return;
    case VecOp::kDiv:
      map(floor_div);
      return;
    case VecOp::kRemainder:
      map(remainder_int);
      return;
    case VecOp::kPow:
      map(pow_int);
      return;
    case VecOp::kMax:
      map([](int64_t p, int64_t q) { return std::max(p, q); });
      return;
    case VecOp::kMin:
      map([](int64_t p, int64_t q) { return std::min(p, q); });
      return;
    case VecOp::kEq:
      map([](int64_t p, int64_t q) { return int64_t{p == q}; });
      return;
    case VecOp::kNe:
      map([](int64_t p, int64_t q) { return int64_t{p != q}; });
      return;
    case VecOp::kLt:
      map([](int64_t p, int64_t q) { return int64_t{p < q}; });
      return;
    case VecOp::kLe:
      map([](int64_t p, int64_t q) { return int64_t{p <= q}; });
      return;
    case VecOp::kGt:
      map([](int64_t p, int64_t q) { return int64_t{p > q}; });
      return;
    case VecOp::kGe:
      map([](int64_t p, int64_t q) { return int64_t{p >= q}; });
      return;
    case VecOp::kLogicalAnd:
      map([](int64_t p, int64_t q) { return int64_t{p != 0 && q != 0}; });
      return;
    case VecOp::kLogicalOr:
      map([](int64_t p, int64_t q) { return int64_t{p != 0 || q != 0}; });
      return;
    case VecOp::kBitAnd:
      map([](int64_t p, int64_t q) { return p & q; });
      return;
    case VecOp::kBitOr:
      map([](int64_t p, int64_t q) { return p | q; });
      return;
    case VecOp::kBitXor:
      map([](int64_t p, int64_t q) { return p ^ q; });
      return;
    default:
      device_error(
          rt::str("vector: op ", static_cast<int>(op), " has no integer form"));
  }
}

// ---- driver ----------------------------------------------------------------

struct Operands {
  TileRef dst, src0, src1, src2;
};

Operands bind_operands(const rt::Vector& v, std::span<uint8_t> spad) {
  Operands ops;
  int n = rt::vec_op_arity(v.op);
  ops.dst = bind_tile(spad, v.dst, v.rows, v.cols, "vector dst");
  if (n >= 1) ops.src0 = bind_tile(spad, v.src0, v.rows, v.cols, "vector src0");
  if (n >= 2 && !(n == 2 && v.src1_is_imm)) {
    ops.src1 = bind_tile(spad, v.src1, v.rows, v.cols, "vector src1");
  }
  if (n == 3) ops.src2 = bind_tile(spad, v.src2, v.rows, v.cols, "vector src2");
  return ops;
}

// Scratch buffers, one set per host thread (cores run on a thread pool).
template <typename T>
struct ChunkBuffers {
  T a[kChunk], b[kChunk], c[kChunk], out[kChunk];
  float cond[kChunk];  // select's condition, always tested as a float
};

int64_t imm_as_int(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v < -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

void run_float_chunk(const rt::Vector& v, const Operands& ops, uint32_t r,
                     uint32_t c0, uint32_t n, ChunkBuffers<float>& buf) {
  FloatArgs args{buf.a, buf.b, buf.out, n};
  switch (rt::vec_op_arity(v.op)) {
    case 0:
      for (uint32_t i = 0; i < n; ++i) {
        double index = static_cast<double>(r) * v.cols + (c0 + i);
        buf.out[i] = static_cast<float>(
            v.op == VecOp::kFill ? v.imm : v.imm + index * v.imm2);
      }
      break;
    case 1:
      load_floats(ops.src0, r, c0, n, buf.a);
      unary_float(v.op, args);
      break;
    case 2:
      load_floats(ops.src0, r, c0, n, buf.a);
      if (v.src1_is_imm) {
        std::fill_n(buf.b, n, static_cast<float>(v.imm));
      } else {
        load_floats(ops.src1, r, c0, n, buf.b);
      }
      if (!(v.src1_is_imm && v.op == VecOp::kPow &&
            ops.src0.dtype != rt::DType::kFloat16 &&
            pow_by_exact_form(static_cast<float>(v.imm), args))) {
        binary_float(v.op, args);
      }
      break;
    default:
      load_floats(ops.src0, r, c0, n, buf.cond);
      load_floats(ops.src1, r, c0, n, buf.b);
      load_floats(ops.src2, r, c0, n, buf.c);
      map_select(buf.cond, buf.b, buf.c, buf.out, n);
      break;
  }
  store_floats(ops.dst, r, c0, n, buf.out);
}

void run_int_chunk(const rt::Vector& v, const Operands& ops, uint32_t r,
                   uint32_t c0, uint32_t n, ChunkBuffers<int64_t>& buf) {
  IntArgs args{buf.a, buf.b, buf.out, n};
  switch (rt::vec_op_arity(v.op)) {
    case 0: {
      int64_t start = imm_as_int(v.imm);
      int64_t step = imm_as_int(v.imm2);
      for (uint32_t i = 0; i < n; ++i) {
        int64_t index = static_cast<int64_t>(r) * v.cols + (c0 + i);
        buf.out[i] = v.op == VecOp::kFill
                         ? start
                         : wrap_add(start, wrap_mul(index, step));
      }
      break;
    }
    case 1:
      load_ints(ops.src0, r, c0, n, buf.a);
      unary_int(v.op, args);
      break;
    case 2:
      load_ints(ops.src0, r, c0, n, buf.a);
      if (v.src1_is_imm) {
        std::fill_n(buf.b, n, imm_as_int(v.imm));
      } else {
        load_ints(ops.src1, r, c0, n, buf.b);
      }
      binary_int(v.op, args);
      break;
    default:
      load_floats(ops.src0, r, c0, n, buf.cond);
      load_ints(ops.src1, r, c0, n, buf.b);
      load_ints(ops.src2, r, c0, n, buf.c);
      map_select(buf.cond, buf.b, buf.c, buf.out, n);
      break;
  }
  store_ints(ops.dst, r, c0, n, buf.out);
}

template <typename T, typename RunChunk>
void run_rows(const rt::Vector& v, const Operands& ops, RunChunk run_chunk) {
  thread_local ChunkBuffers<T> buffers;
  for (uint32_t r = 0; r < v.rows; ++r) {
    for (uint32_t c0 = 0; c0 < v.cols; c0 += kChunk) {
      run_chunk(v, ops, r, c0, std::min(kChunk, v.cols - c0), buffers);
    }
  }
}

#if defined(__SSE2__)
// One 8 x 8 block of a transpose: element (r, c) moves from in + r * ES +
// c * in_col (a source read down its columns) to out + r * out_row + c * ES
// (rows contiguous), as bits (loads, shuffles and stores never touch a
// value, so a signalling NaN stays signalling). This is the on-chip
// transpose of every linear layer's weights, elementwise the emulator's
// hottest loop.
template <size_t ES>
void transpose_block(const uint8_t* in, int64_t in_col, uint8_t* out,
                     int64_t out_row);

template <>
[[gnu::always_inline]] inline void transpose_block<4>(const uint8_t* in,
                                                      int64_t in_col,
                                                      uint8_t* out,
                                                      int64_t out_row) {
  for (int c = 0; c < 8; c += 4) {
    for (int r = 0; r < 8; r += 4) {
      const uint8_t* src = in + r * 4 + c * in_col;
      __m128 x0 = _mm_loadu_ps(reinterpret_cast<const float*>(src));
      __m128 x1 = _mm_loadu_ps(reinterpret_cast<const float*>(src + in_col));
      __m128 x2 =
          _mm_loadu_ps(reinterpret_cast<const float*>(src + 2 * in_col));
      __m128 x3 =
          _mm_loadu_ps(reinterpret_cast<const float*>(src + 3 * in_col));
      _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
      uint8_t* dst = out + r * out_row + c * 4;
      _mm_storeu_ps(reinterpret_cast<float*>(dst), x0);
      _mm_storeu_ps(reinterpret_cast<float*>(dst + out_row), x1);
      _mm_storeu_ps(reinterpret_cast<float*>(dst + 2 * out_row), x2);
      _mm_storeu_ps(reinterpret_cast<float*>(dst + 3 * out_row), x3);
    }
  }
}

template <>
[[gnu::always_inline]] inline void transpose_block<2>(const uint8_t* in,
                                                      int64_t in_col,
                                                      uint8_t* out,
                                                      int64_t out_row) {
  __m128i x[8], y[8];
  for (int c = 0; c < 8; ++c) {
    x[c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c * in_col));
  }
  // Interleave 16-, then 32-, then 64-bit lanes: x[c] holds column c
  // (rows 0..7); after three rounds y[r] holds row r (columns 0..7).
  for (int i = 0; i < 4; ++i) {
    y[2 * i] = _mm_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
    y[2 * i + 1] = _mm_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    for (int i = 0; i < 2; ++i) {
      x[h + 2 * i] = _mm_unpacklo_epi32(y[h + i], y[h + i + 2]);
      x[h + 2 * i + 1] = _mm_unpackhi_epi32(y[h + i], y[h + i + 2]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    y[2 * i] = _mm_unpacklo_epi64(x[i], x[i + 4]);
    y[2 * i + 1] = _mm_unpackhi_epi64(x[i], x[i + 4]);
  }
  for (int r = 0; r < 8; ++r) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r * out_row), y[r]);
  }
}
#endif

// Copies rows x cols elements of ES bytes between non-overlapping tiles in
// square blocks, so a source read down its columns is read a few cache lines
// at a time rather than one element per line along each row.
template <size_t ES>
void copy_in_blocks(const TileRef& dst, const TileRef& src, uint32_t rows,
                    uint32_t cols) {
  // Locals, not the tiles' fields: the byte copies could alias those, which
  // would make the compiler reload them for every element.
  uint8_t* const out = dst.base;
  const uint8_t* const in = src.base;
  const int64_t out_row = dst.row_stride, out_col = dst.col_stride;
  const int64_t in_row = src.row_stride, in_col = src.col_stride;
  const auto copy_one = [=](uint32_t r, uint32_t c) {
    std::memcpy(out + r * out_row + c * out_col, in + r * in_row + c * in_col,
                ES);
  };
#if defined(__SSE2__)
  if constexpr (ES == 2 || ES == 4) {
    if (in_row == ES && out_col == ES) {
      constexpr uint32_t kBlock = 8;
      const uint32_t full_rows = rows / kBlock * kBlock;
      const uint32_t full_cols = cols / kBlock * kBlock;
      for (uint32_t r = 0; r < full_rows; r += kBlock) {
        for (uint32_t c = 0; c < full_cols; c += kBlock) {
          transpose_block<ES>(in + r * in_row + c * in_col, in_col,
                              out + r * out_row + c * out_col, out_row);
        }
      }
      // The ragged edges: the last cols of the full rows, then the last rows.
      for_each_in_blocks(
          full_rows, cols - full_cols,
          [&](uint32_t r, uint32_t c) { copy_one(r, full_cols + c); });
      for_each_in_blocks(rows - full_rows, cols, [&](uint32_t r, uint32_t c) {
        copy_one(full_rows + r, c);
      });
      return;
    }
  }
#endif
  for_each_in_blocks(rows, cols, copy_one);
}

// A copy that only moves elements (same dtype) moves each element's bytes
// as they are: converting through fp32 and back, as the element-wise path
// does, would quiet a signalling NaN, and a copy must give back the bits it
// read (PyTorch's copies do). Rows contiguous on both sides move whole; any
// other strides (a transpose, read down the source's columns: how kernels
// lay a linear layer's weights out for the matrix unit) move in square
// blocks. Bool (which the element-wise path normalises to 0/1) and
// overlapping tiles (whose result depends on the order of the rows) keep the
// element-wise path. False when it does not apply.
bool copy_as_bytes(const rt::Vector& v, const Operands& ops) {
  const TileRef& src = ops.src0;
  const TileRef& dst = ops.dst;
  if (v.op != VecOp::kCopy || v.rows == 0 || v.cols == 0 ||
      src.dtype != dst.dtype || dst.dtype == rt::DType::kBool) {
    return false;
  }
  const auto [src_lo, src_hi] = span_of(src, v.rows, v.cols);
  const auto [dst_lo, dst_hi] = span_of(dst, v.rows, v.cols);
  if (src_lo < dst_hi && dst_lo < src_hi) return false;
  if (src.contiguous_rows() && dst.contiguous_rows()) {
    const size_t row_bytes = size_t{v.cols} * rt::element_size(dst.dtype);
    for (uint32_t r = 0; r < v.rows; ++r) {
      std::memcpy(dst.at(r, 0), src.at(r, 0), row_bytes);
    }
    return true;
  }
  switch (rt::element_size(dst.dtype)) {
    case 1:
      copy_in_blocks<1>(dst, src, v.rows, v.cols);
      return true;
    case 2:
      copy_in_blocks<2>(dst, src, v.rows, v.cols);
      return true;
    case 4:
      copy_in_blocks<4>(dst, src, v.rows, v.cols);
      return true;
    case 8:
      copy_in_blocks<8>(dst, src, v.rows, v.cols);
      return true;
    default:
      return false;
  }
}

}  // namespace

void run_vector(const rt::Vector& v, std::span<uint8_t> spad) {
  if (static_cast<int>(v.op) >= rt::kNumVecOps) {
    device_error(rt::str("vector: unknown op code ", static_cast<int>(v.op)));
  }
  Operands ops = bind_operands(v, spad);
  if (copy_as_bytes(v, ops)) return;
  if (computes_in_float(v)) {
    run_rows<float>(v, ops, run_float_chunk);
  } else {
    run_rows<int64_t>(v, ops, run_int_chunk);
  }
}

}  // namespace spyre::sim
