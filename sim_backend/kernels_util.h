// Private helpers shared by the kernels_*.cpp units: checked scratchpad
// tiles, per-element and per-row dtype conversion, and the Philox generator.
// Not part of the emulator's interface; the tests include it for Philox.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "spyre/runtime/dtype.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/half.h"
#include "spyre/runtime/program.h"

namespace spyre::sim {

// A tile whose every element was checked to lie inside the scratchpad.
struct TileRef {
  uint8_t* base = nullptr;  // element (0, 0)
  rt::DType dtype = rt::DType::kFloat16;
  int64_t row_stride = 0;
  int64_t col_stride = 0;

  uint8_t* at(uint32_t r, uint32_t c) const {
    return base + r * row_stride + c * col_stride;
  }
  bool contiguous_rows() const { return col_stride == rt::element_size(dtype); }
};

// The bytes [first, last) a rows x cols view spans (its corner elements
// bound it); rows and cols at least 1.
std::pair<const uint8_t*, const uint8_t*> span_of(const TileRef& t,
                                                  uint32_t rows, uint32_t cols);

// Checks that a rows x cols view of `tile` lies inside `spad` and returns it.
// Raises rt::Error(kDeviceError) naming `what` (e.g. "vector src1") if not.
TileRef bind_tile(std::span<uint8_t> spad, const rt::Tile& tile, uint32_t rows,
                  uint32_t cols, const char* what);

[[noreturn]] void device_error(const std::string& message);

// Float to integer as PyTorch's CPU casts do, the reference results are
// compared with: truncation toward zero. C++ leaves NaN and values outside
// the target's range undefined; on x86 (cvttss2si) they give the "integer
// indefinite", the target's minimum, and the CPU's narrower casts (int8,
// uint8) go through int32 and keep its low bits. So 1e10 becomes INT32_MIN
// as int32 and 0 as int8, and 300.7 becomes 44 as int8.
inline int64_t truncate_to_int64(float x) {
  if (!(x >= -9.2233720368547758e18f && x < 9.2233720368547758e18f)) {
    return std::numeric_limits<int64_t>::min();
  }
  return static_cast<int64_t>(x);
}
inline int32_t truncate_to_int32(float x) {
  if (!(x >= -2147483648.0f && x < 2147483648.0f)) {
    return std::numeric_limits<int32_t>::min();
  }
  return static_cast<int32_t>(x);
}

template <typename T>
T load_as(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store_as(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// One element of any dtype as fp32 (integers convert as static_cast does).
inline float load_float(const uint8_t* p, rt::DType t) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      return rt::fp16_to_float(load_as<uint16_t>(p));
    case DType::kBFloat16:
      return rt::bf16_to_float(load_as<uint16_t>(p));
    case DType::kFloat32:
      return load_as<float>(p);
    case DType::kInt8:
      return static_cast<float>(load_as<int8_t>(p));
    case DType::kInt32:
      return static_cast<float>(load_as<int32_t>(p));
    case DType::kInt64:
      return static_cast<float>(load_as<int64_t>(p));
    case DType::kBool:
    case DType::kUInt8:
      return static_cast<float>(*p);
  }
  return 0.0f;
}

// One element of any dtype as int64 (floats truncate toward zero).
inline int64_t load_int(const uint8_t* p, rt::DType t) {
  using rt::DType;
  switch (t) {
    case DType::kInt8:
      return load_as<int8_t>(p);
    case DType::kInt32:
      return load_as<int32_t>(p);
    case DType::kInt64:
      return load_as<int64_t>(p);
    case DType::kBool:
    case DType::kUInt8:
      return *p;
    default:
      return truncate_to_int64(load_float(p, t));
  }
}

// Stores an integer; narrower integer dtypes wrap (two's complement), bool
// stores 1 for any nonzero value.
inline void store_int(uint8_t* p, rt::DType t, int64_t v) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      store_as(p, rt::float_to_fp16(static_cast<float>(v)));
      return;
    case DType::kBFloat16:
      store_as(p, rt::float_to_bf16(static_cast<float>(v)));
      return;
    case DType::kFloat32:
      store_as(p, static_cast<float>(v));
      return;
    case DType::kInt8:
      store_as(p, static_cast<int8_t>(v));
      return;
    case DType::kInt32:
      store_as(p, static_cast<int32_t>(v));
      return;
    case DType::kInt64:
      store_as(p, v);
      return;
    case DType::kBool:
      *p = v != 0;
      return;
    case DType::kUInt8:
      *p = static_cast<uint8_t>(v);
      return;
  }
}

// Stores an fp32 value rounded once to nearest-even for 16-bit floats; into
// integers it truncates as the CPU does (int64 directly, narrower integers
// through int32: see truncate_to_int64), into bool it tests != 0.
inline void store_float(uint8_t* p, rt::DType t, float v) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      store_as(p, rt::float_to_fp16(v));
      return;
    case DType::kBFloat16:
      store_as(p, rt::float_to_bf16(v));
      return;
    case DType::kFloat32:
      store_as(p, v);
      return;
    case DType::kBool:
      *p = v != 0.0f;
      return;
    case DType::kInt64:
      store_int(p, t, truncate_to_int64(v));
      return;
    default:
      store_int(p, t, truncate_to_int32(v));
      return;
  }
}

// Calls fn(std::integral_constant<rt::DType, t>{}): an element loop written
// in fn over load_float / store_float / load_int / store_int with that
// constant decides the dtype once, where a loop over the runtime dtype
// switches (an indirect jump) on every element.
template <typename Fn>
void with_dtype(rt::DType t, Fn&& fn) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      return fn(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16:
      return fn(std::integral_constant<DType, DType::kBFloat16>{});
    case DType::kFloat32:
      return fn(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kInt8:
      return fn(std::integral_constant<DType, DType::kInt8>{});
    case DType::kInt32:
      return fn(std::integral_constant<DType, DType::kInt32>{});
    case DType::kInt64:
      return fn(std::integral_constant<DType, DType::kInt64>{});
    case DType::kBool:
      return fn(std::integral_constant<DType, DType::kBool>{});
    case DType::kUInt8:
      return fn(std::integral_constant<DType, DType::kUInt8>{});
  }
}

// Row segments: n elements of row r starting at column c0, converted to or
// from a contiguous buffer. Contiguous rows take vectorised paths, a column
// stride of 0 broadcasts one element, anything else goes element by element.
void load_floats(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                 float* out);
// The side of the square blocks transposing loops move: 8 rows a large
// power-of-two stride apart still fit one set of an 8-way L1 cache; on the
// B-tile transposes matmul kernels emit it measured as fast as 16 or faster.
inline constexpr uint32_t kTransposeBlock = 8;

// Calls fn(r, c) for every element of rows x cols, block by block, down each
// block's columns: the order of a transposing loop.
template <typename Fn>
void for_each_in_blocks(uint32_t rows, uint32_t cols, Fn&& fn) {
  for (uint32_t r0 = 0; r0 < rows; r0 += kTransposeBlock) {
    const uint32_t r1 = std::min(rows, r0 + kTransposeBlock);
    for (uint32_t c0 = 0; c0 < cols; c0 += kTransposeBlock) {
      const uint32_t c1 = std::min(cols, c0 + kTransposeBlock);
      for (uint32_t c = c0; c < c1; ++c) {
        for (uint32_t r = r0; r < r1; ++r) fn(r, c);
      }
    }
  }
}

// Whether `t` runs down its columns (its rows' elements a stride apart, its
// columns' adjacent): a transposed operand.
inline bool column_contiguous(const TileRef& t) {
  return t.row_stride == rt::element_size(t.dtype) && !t.contiguous_rows() &&
         t.col_stride != 0;
}
// All rows x cols of a column-contiguous `t` into row-major `out`, the
// values load_floats gives, read in square blocks: row by row, a column
// stride touches a new cache line for every element.
void load_columns_as_rows(const TileRef& t, uint32_t rows, uint32_t cols,
                          float* out);
void store_floats(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                  const float* in);
void load_ints(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
               int64_t* out);
void store_ints(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                const int64_t* in);

// Contiguous conversions (vectorised with F16C where the host has it).
void fp16_to_float_n(const uint8_t* src, uint32_t n, float* out);
void float_to_fp16_n(const float* in, uint32_t n, uint8_t* dst);

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): a counter-based generator, one 128-bit block per counter.
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53u;  // round multipliers
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // key schedule increments
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

}  // namespace spyre::sim
