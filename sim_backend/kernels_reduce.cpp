// Row reductions: dst(r, 0) = reduce(src(r, :)). Floating data accumulates in
// fp32 (eight interleaved partial sums for sum/prod, so the loop vectorises
// and rounding error grows with cols / 8), integer data in int64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels.h"
#include "kernels_util.h"

namespace spyre::sim {
namespace {

using rt::RedOp;

constexpr uint32_t kChunk = 256;
constexpr uint32_t kLanes = 8;

bool is_arg(RedOp op) { return op == RedOp::kArgMax || op == RedOp::kArgMin; }

// A running reduction over chunks of one row, in the compute type T.
template <typename T>
struct Accumulator {
  RedOp op;
  T lanes[kLanes];
  T extreme;          // max/min and the arg reductions
  int64_t index = 0;  // arg reductions: column of `extreme`
  bool has_value = false;

  explicit Accumulator(RedOp o) : op(o) {
    T identity = o == RedOp::kProd ? T{1} : T{0};
    std::fill_n(lanes, kLanes, identity);
    extreme = T{0};
  }
};

template <typename T>
bool is_nan(T v) {
  return v != v;  // always false for integers
}

// True when `v` should replace the current extreme: strictly better, or the
// first NaN (NaN wins and, once held, nothing replaces it).
template <typename T>
bool replaces(RedOp op, T v, T current) {
  if (is_nan(current)) return false;
  if (is_nan(v)) return true;
  bool wants_max = op == RedOp::kMax || op == RedOp::kArgMax;
  return wants_max ? v > current : v < current;
}

template <typename T>
void fold_lanes(T* __restrict lanes, const T* __restrict x, uint32_t n,
                bool product) {
  uint32_t i = 0;
  if (product) {
    for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 8
      for (uint32_t j = 0; j < kLanes; ++j) lanes[j] *= x[i + j];
    }
    for (uint32_t j = 0; i < n; ++i, ++j) lanes[j] *= x[i];
  } else {
    for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 8
      for (uint32_t j = 0; j < kLanes; ++j) lanes[j] += x[i + j];
    }
    for (uint32_t j = 0; i < n; ++i, ++j) lanes[j] += x[i];
  }
}

// Integer sums and products wrap like int64 tensors do, without UB.
template <>
void fold_lanes<int64_t>(int64_t* __restrict lanes, const int64_t* __restrict x,
                         uint32_t n, bool product) {
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t lane = static_cast<uint64_t>(lanes[i % kLanes]);
    uint64_t v = static_cast<uint64_t>(x[i]);
    lanes[i % kLanes] = static_cast<int64_t>(product ? lane * v : lane + v);
  }
}

template <typename T>
void accumulate_chunk(Accumulator<T>& acc, const T* x, uint32_t c0,
                      uint32_t n) {
  if (acc.op == RedOp::kSum || acc.op == RedOp::kProd) {
    fold_lanes<T>(acc.lanes, x, n, acc.op == RedOp::kProd);
    return;
  }
  uint32_t i = 0;
  if (!acc.has_value && n > 0) {
    acc.extreme = x[0];
    acc.index = c0;
    acc.has_value = true;
    i = 1;
  }
  for (; i < n; ++i) {
    if (replaces(acc.op, x[i], acc.extreme)) {
      acc.extreme = x[i];
      acc.index = c0 + i;
    }
  }
}

template <typename T>
T combine(T p, T q, bool product) {
  if constexpr (std::is_integral_v<T>) {
    uint64_t a = static_cast<uint64_t>(p), b = static_cast<uint64_t>(q);
    return static_cast<T>(product ? a * b : a + b);
  } else {
    return product ? p * q : p + q;
  }
}

// The row's value, with an existing dst value folded in when accumulating.
template <typename T>
T finish(const Accumulator<T>& acc, bool has_prior, T prior) {
  if (acc.op == RedOp::kSum || acc.op == RedOp::kProd) {
    bool product = acc.op == RedOp::kProd;
    T total = acc.lanes[0];
    for (uint32_t j = 1; j < kLanes; ++j) {
      total = combine(total, acc.lanes[j], product);
    }
    return has_prior ? combine(prior, total, product) : total;
  }
  if (has_prior && replaces(acc.op, prior, acc.extreme)) return prior;
  return acc.extreme;
}

void load_chunk(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                float* out) {
  load_floats(t, r, c0, n, out);
}
void load_chunk(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                int64_t* out) {
  load_ints(t, r, c0, n, out);
}

template <typename T>
void store_value(uint8_t* p, rt::DType dtype, T v) {
  if constexpr (std::is_integral_v<T>) {
    store_int(p, dtype, v);
  } else {
    store_float(p, dtype, v);
  }
}

template <typename T>
T load_value(const uint8_t* p, rt::DType dtype) {
  if constexpr (std::is_integral_v<T>) {
    return load_int(p, dtype);
  } else {
    return load_float(p, dtype);
  }
}

template <typename T>
void reduce_rows(const rt::Reduce& red, const TileRef& dst,
                 const TileRef& src) {
  thread_local T chunk[kChunk];
  for (uint32_t r = 0; r < red.rows; ++r) {
    Accumulator<T> acc(red.op);
    for (uint32_t c0 = 0; c0 < red.cols; c0 += kChunk) {
      uint32_t n = std::min(kChunk, red.cols - c0);
      load_chunk(src, r, c0, n, chunk);
      accumulate_chunk(acc, chunk, c0, n);
    }
    uint8_t* out = dst.at(r, 0);
    if (is_arg(red.op)) {
      int64_t index =
          static_cast<int64_t>(static_cast<uint64_t>(acc.index) +
                               static_cast<uint64_t>(red.index_base));
      store_int(out, dst.dtype, index);
      continue;
    }
    T prior = red.accumulate ? load_value<T>(out, dst.dtype) : T{0};
    store_value(out, dst.dtype, finish(acc, red.accumulate, prior));
  }
}

}  // namespace

void run_reduce(const rt::Reduce& red, std::span<uint8_t> spad) {
  if (static_cast<int>(red.op) >= rt::kNumRedOps) {
    device_error(rt::str("reduce: unknown op code ", static_cast<int>(red.op)));
  }
  if (red.accumulate && is_arg(red.op)) {
    device_error("reduce: accumulate is not valid for argmax/argmin");
  }
  if (red.rows > 0 && red.cols == 0 && is_arg(red.op)) {
    device_error("reduce: argmax/argmin of an empty row has no index");
  }
  TileRef dst = bind_tile(spad, red.dst, red.rows, 1, "reduce dst");
  TileRef src = bind_tile(spad, red.src, red.rows, red.cols, "reduce src");
  if (rt::is_floating(red.src.dtype) && column_contiguous(src) &&
      red.rows > 0 && red.cols > 0) {
    // A transposed tile (each row's elements a stride apart): its values
    // gathered into rows first, in blocks, then reduced as any rows.
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(red.rows) * red.cols);
    load_columns_as_rows(src, red.rows, red.cols, rows.data());
    const TileRef gathered{reinterpret_cast<uint8_t*>(rows.data()),
                           rt::DType::kFloat32, int64_t{red.cols} * 4, 4};
    reduce_rows<float>(red, dst, gathered);
  } else if (rt::is_floating(red.src.dtype)) {
    reduce_rows<float>(red, dst, src);
  } else {
    reduce_rows<int64_t>(red, dst, src);
  }
}

}  // namespace spyre::sim
