// The matrix unit: C[m, n] (+)= A[m, k] * B[k, n].
//
// Floating operands are converted into contiguous fp32 buffers (F16C for
// fp16) and multiplied with OpenBLAS's sgemm, which accumulates in fp32.
// OpenBLAS is switched to one thread, once per process, with
// openblas_set_num_threads(1): the emulator runs cores on its own thread
// pool, and an environment variable would only work if set before the
// library loads, which a library cannot ensure. int8 uses a plain integer
// loop into int32 (wrapping on overflow, like int32 arithmetic on device).
#include <cblas.h>

#include <algorithm>
#include <iterator>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels.h"
#include "kernels_util.h"

namespace spyre::sim {
namespace {

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Grows once per thread to the largest tile seen; no allocation afterwards.
template <typename T>
T* scratch(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// Copies a rows x cols view into a row-major fp32 buffer.
void gather_rows(const TileRef& t, uint32_t rows, uint32_t cols, float* out) {
  for (uint32_t r = 0; r < rows; ++r) {
    load_floats(t, r, 0, cols, out + static_cast<size_t>(r) * cols);
  }
}

// Copies the transpose of a rows x cols view (its columns as rows): used for
// column-contiguous operands, whose columns are the contiguous runs.
void gather_columns(const TileRef& t, uint32_t rows, uint32_t cols,
                    float* out) {
  TileRef transposed{t.base, t.dtype, t.col_stride, t.row_stride};
  gather_rows(transposed, cols, rows, out);
}

// Loads an operand as fp32 and says how sgemm must read it.
CBLAS_TRANSPOSE load_operand(const TileRef& t, uint32_t rows, uint32_t cols,
                             float* out) {
  if (column_contiguous(t)) {
    gather_columns(t, rows, cols, out);
    return CblasTrans;
  }
  gather_rows(t, rows, cols, out);
  return CblasNoTrans;
}

bool c_is_direct(const TileRef& c, uint32_t n, std::span<uint8_t> spad) {
  auto addr = reinterpret_cast<uintptr_t>(c.base);
  return c.contiguous_rows() && c.row_stride % 4 == 0 &&
         c.row_stride >= static_cast<int64_t>(n) * 4 && addr % 4 == 0 &&
         !spad.empty();
}

// An operand as sgemm reads it: fp32 data with unit stride along its rows
// or its columns is read where it lies in the scratchpad; other data is
// converted into `buffer` first.
struct SgemmOperand {
  const float* data;
  CBLAS_TRANSPOSE trans;
  int ld;
};

// `written`: the bytes the product's result goes to; an operand that
// shares any of them is read from a copy.
SgemmOperand sgemm_operand(const TileRef& t, uint32_t rows, uint32_t cols,
                           std::vector<float>& buffer,
                           std::pair<const uint8_t*, const uint8_t*> written) {
  const auto [lo, hi] = span_of(t, rows, cols);
  const bool apart = hi <= written.first || written.second <= lo;
  const bool fp32 = apart && t.dtype == rt::DType::kFloat32 &&
                    reinterpret_cast<uintptr_t>(t.base) % alignof(float) == 0;
  if (fp32 && t.contiguous_rows() && t.row_stride % 4 == 0 &&
      t.row_stride >= static_cast<int64_t>(cols) * 4) {
    return {reinterpret_cast<const float*>(t.base), CblasNoTrans,
            static_cast<int>(t.row_stride / 4)};
  }
  if (fp32 && column_contiguous(t) && t.col_stride % 4 == 0 &&
      t.col_stride >= static_cast<int64_t>(rows) * 4) {
    return {reinterpret_cast<const float*>(t.base), CblasTrans,
            static_cast<int>(t.col_stride / 4)};
  }
  float* converted = scratch(buffer, static_cast<size_t>(rows) * cols);
  const CBLAS_TRANSPOSE trans = load_operand(t, rows, cols, converted);
  return {converted, trans,
          static_cast<int>(trans == CblasTrans ? rows : cols)};
}

void matmul_float(const rt::MatMul& mm, const TileRef& a, const TileRef& b,
                  const TileRef& c, std::span<uint8_t> spad) {
  use_single_threaded_blas();
  thread_local std::vector<float> a_buf, b_buf, c_buf;
  const uint32_t m = mm.m, n = mm.n, k = mm.k;
  const auto written = span_of(c, m, n);
  const SgemmOperand a_op = sgemm_operand(a, m, k, a_buf, written);
  const SgemmOperand b_op = sgemm_operand(b, k, n, b_buf, written);
  const float* a32 = a_op.data;
  const float* b32 = b_op.data;
  const CBLAS_TRANSPOSE ta = a_op.trans, tb = b_op.trans;
  const int lda = a_op.ld, ldb = b_op.ld;
  if (c_is_direct(c, n, spad)) {
    float* c32 = reinterpret_cast<float*>(c.base);
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a32, lda, b32, ldb,
                mm.accumulate ? 1.0f : 0.0f, c32,
                static_cast<int>(c.row_stride / 4));
    return;
  }
  float* c32 = scratch(c_buf, static_cast<size_t>(m) * n);
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a32, lda, b32, ldb, 0.0f,
              c32, n);
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < n; ++j) {
      uint8_t* p = c.at(r, j);
      float prior = mm.accumulate ? load_as<float>(p) : 0.0f;
      store_as(p, prior + c32[static_cast<size_t>(r) * n + j]);
    }
  }
}

void matmul_int8(const rt::MatMul& mm, const TileRef& a, const TileRef& b,
                 const TileRef& c) {
  thread_local std::vector<int32_t> b_buf, row_buf;
  const uint32_t m = mm.m, n = mm.n, k = mm.k;
  int32_t* b32 = scratch(b_buf, static_cast<size_t>(k) * n);
  uint32_t* acc = reinterpret_cast<uint32_t*>(scratch(row_buf, n));
  for (uint32_t p = 0; p < k; ++p) {
    for (uint32_t j = 0; j < n; ++j) {
      b32[static_cast<size_t>(p) * n + j] = load_as<int8_t>(b.at(p, j));
    }
  }
  for (uint32_t r = 0; r < m; ++r) {
    std::fill_n(acc, n, 0u);
    for (uint32_t p = 0; p < k; ++p) {
      uint32_t av = static_cast<uint32_t>(load_as<int8_t>(a.at(r, p)));
      const int32_t* brow = b32 + static_cast<size_t>(p) * n;
      for (uint32_t j = 0; j < n; ++j) {
        acc[j] += av * static_cast<uint32_t>(brow[j]);
      }
    }
    for (uint32_t j = 0; j < n; ++j) {
      uint8_t* out = c.at(r, j);
      uint32_t prior =
          mm.accumulate ? static_cast<uint32_t>(load_as<int32_t>(out)) : 0u;
      store_as(out, static_cast<int32_t>(prior + acc[j]));
    }
  }
}

}  // namespace

void run_matmul(const rt::MatMul& mm, std::span<uint8_t> spad) {
  TileRef a = bind_tile(spad, mm.a, mm.m, mm.k, "matmul A");
  TileRef b = bind_tile(spad, mm.b, mm.k, mm.n, "matmul B");
  TileRef c = bind_tile(spad, mm.c, mm.m, mm.n, "matmul C");
  if (mm.m == 0 || mm.n == 0) return;
  using rt::DType;
  bool float_inputs =
      rt::is_floating(mm.a.dtype) && rt::is_floating(mm.b.dtype);
  if (float_inputs && mm.c.dtype == DType::kFloat32) {
    if (mm.k == 0) {
      if (!mm.accumulate) {
        for (uint32_t r = 0; r < mm.m; ++r) {
          for (uint32_t j = 0; j < mm.n; ++j) store_as(c.at(r, j), 0.0f);
        }
      }
      return;
    }
    matmul_float(mm, a, b, c, spad);
    return;
  }
  if (mm.a.dtype == DType::kInt8 && mm.b.dtype == DType::kInt8 &&
      mm.c.dtype == DType::kInt32) {
    matmul_int8(mm, a, b, c);
    return;
  }
  device_error(rt::str(
      "matmul: unsupported dtypes A=", rt::dtype_name(mm.a.dtype),
      " B=", rt::dtype_name(mm.b.dtype), " C=", rt::dtype_name(mm.c.dtype),
      " (use fp16/bf16/fp32 with fp32 C, or int8 with int32 C)"));
}

}  // namespace spyre::sim
