// Checked tiles and row conversions shared by the kernels.
#include "kernels_util.h"

#include <algorithm>
#include <iterator>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace spyre::sim {

void device_error(const std::string& message) {
  throw rt::Error(rt::ErrorCode::kDeviceError, message);
}

TileRef bind_tile(std::span<uint8_t> spad, const rt::Tile& tile, uint32_t rows,
                  uint32_t cols, const char* what) {
  TileRef ref{spad.data() + tile.offset, tile.dtype, tile.row_stride,
              tile.col_stride};
  if (!rt::is_valid_dtype(static_cast<uint8_t>(tile.dtype))) {
    device_error(
        rt::str(what, ": invalid dtype code ", static_cast<int>(tile.dtype)));
  }
  if (rows == 0 || cols == 0) {
    ref.base = spad.data();  // nothing is touched; keep the pointer in range
    return ref;
  }
  // The extreme byte offsets come from the corners, whatever the strides'
  // signs; 64-bit math cannot overflow for 32-bit counts and strides.
  int64_t row_span = static_cast<int64_t>(rows - 1) * tile.row_stride;
  int64_t col_span = static_cast<int64_t>(cols - 1) * tile.col_stride;
  int64_t lo = tile.offset + std::min<int64_t>(0, row_span) +
               std::min<int64_t>(0, col_span);
  int64_t hi = tile.offset + std::max<int64_t>(0, row_span) +
               std::max<int64_t>(0, col_span) + rt::element_size(tile.dtype);
  if (lo < 0 || hi > static_cast<int64_t>(spad.size())) {
    device_error(rt::str(
        what, ": ", rows, "x", cols, " ", rt::dtype_name(tile.dtype),
        " tile at offset ", tile.offset, " (row stride ", tile.row_stride,
        ", col stride ", tile.col_stride, ") spans bytes [", lo, ", ", hi,
        ") outside the ", spad.size(), "-byte scratchpad"));
  }
  return ref;
}

void fp16_to_float_n(const uint8_t* src, uint32_t n, float* out) {
  uint32_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = rt::fp16_to_float(load_as<uint16_t>(src + 2 * i));
}

void float_to_fp16_n(const float* in, uint32_t n, uint8_t* dst) {
  uint32_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
#endif
  for (; i < n; ++i) store_as(dst + 2 * i, rt::float_to_fp16(in[i]));
}

namespace {

// Contiguous loops written plainly over typed copies so GCC vectorises them.
template <typename T>
void widen_to_float(const uint8_t* src, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(load_as<T>(src + i * sizeof(T)));
  }
}

template <typename T>
void widen_to_int(const uint8_t* src, uint32_t n, int64_t* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = load_as<T>(src + i * sizeof(T));
}

template <typename T>
void narrow_int(const int64_t* in, uint32_t n, uint8_t* dst) {
  for (uint32_t i = 0; i < n; ++i) {
    store_as(dst + i * sizeof(T), static_cast<T>(in[i]));
  }
}

bool load_floats_contiguous(rt::DType t, const uint8_t* p, uint32_t n,
                            float* out) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      fp16_to_float_n(p, n, out);
      return true;
    case DType::kBFloat16:
      for (uint32_t i = 0; i < n; ++i) {
        out[i] = rt::bf16_to_float(load_as<uint16_t>(p + 2 * i));
      }
      return true;
    case DType::kFloat32:
      std::memcpy(out, p, n * sizeof(float));
      return true;
    case DType::kInt8:
      widen_to_float<int8_t>(p, n, out);
      return true;
    case DType::kInt32:
      widen_to_float<int32_t>(p, n, out);
      return true;
    case DType::kBool:
    case DType::kUInt8:
      widen_to_float<uint8_t>(p, n, out);
      return true;
    default:
      return false;
  }
}

bool store_floats_contiguous(rt::DType t, const float* in, uint32_t n,
                             uint8_t* p) {
  using rt::DType;
  switch (t) {
    case DType::kFloat16:
      float_to_fp16_n(in, n, p);
      return true;
    case DType::kBFloat16:
      for (uint32_t i = 0; i < n; ++i) {
        store_as(p + 2 * i, rt::float_to_bf16(in[i]));
      }
      return true;
    case DType::kFloat32:
      std::memcpy(p, in, n * sizeof(float));
      return true;
    case DType::kBool:
      for (uint32_t i = 0; i < n; ++i) p[i] = in[i] != 0.0f;
      return true;
    default:
      return false;
  }
}

}  // namespace

std::pair<const uint8_t*, const uint8_t*> span_of(const TileRef& t,
                                                  uint32_t rows,
                                                  uint32_t cols) {
  const uint8_t* corners[] = {t.at(0, 0), t.at(rows - 1, 0), t.at(0, cols - 1),
                              t.at(rows - 1, cols - 1)};
  const auto [lo, hi] =
      std::minmax_element(std::begin(corners), std::end(corners));
  return {*lo, *hi + rt::element_size(t.dtype)};
}

void load_floats(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                 float* out) {
  const uint8_t* p = t.at(r, c0);
  if (t.col_stride == 0) {
    std::fill_n(out, n, load_float(p, t.dtype));
    return;
  }
  if (t.contiguous_rows() && load_floats_contiguous(t.dtype, p, n, out)) return;
  const int64_t stride = t.col_stride;
  with_dtype(t.dtype, [&](auto type) {
    for (uint32_t i = 0; i < n; ++i) out[i] = load_float(p + i * stride, type);
  });
}

void load_columns_as_rows(const TileRef& t, uint32_t rows, uint32_t cols,
                          float* out) {
  with_dtype(t.dtype, [&](auto type) {
    for_each_in_blocks(rows, cols, [&](uint32_t r, uint32_t c) {
      out[static_cast<size_t>(r) * cols + c] = load_float(t.at(r, c), type);
    });
  });
}

void store_floats(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                  const float* in) {
  uint8_t* p = t.at(r, c0);
  if (t.contiguous_rows() && store_floats_contiguous(t.dtype, in, n, p)) return;
  const int64_t stride = t.col_stride;
  with_dtype(t.dtype, [&](auto type) {
    for (uint32_t i = 0; i < n; ++i) store_float(p + i * stride, type, in[i]);
  });
}

void load_ints(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
               int64_t* out) {
  using rt::DType;
  const uint8_t* p = t.at(r, c0);
  if (t.col_stride == 0) {
    std::fill_n(out, n, load_int(p, t.dtype));
    return;
  }
  if (t.contiguous_rows()) {
    switch (t.dtype) {
      case DType::kInt8:
        widen_to_int<int8_t>(p, n, out);
        return;
      case DType::kInt32:
        widen_to_int<int32_t>(p, n, out);
        return;
      case DType::kInt64:
        std::memcpy(out, p, n * sizeof(int64_t));
        return;
      case DType::kBool:
      case DType::kUInt8:
        widen_to_int<uint8_t>(p, n, out);
        return;
      default:
        break;
    }
  }
  const int64_t stride = t.col_stride;
  with_dtype(t.dtype, [&](auto type) {
    for (uint32_t i = 0; i < n; ++i) out[i] = load_int(p + i * stride, type);
  });
}

void store_ints(const TileRef& t, uint32_t r, uint32_t c0, uint32_t n,
                const int64_t* in) {
  using rt::DType;
  uint8_t* p = t.at(r, c0);
  if (t.contiguous_rows()) {
    switch (t.dtype) {
      case DType::kInt8:
        narrow_int<int8_t>(in, n, p);
        return;
      case DType::kInt32:
        narrow_int<int32_t>(in, n, p);
        return;
      case DType::kInt64:
        std::memcpy(p, in, n * sizeof(int64_t));
        return;
      case DType::kUInt8:
        narrow_int<uint8_t>(in, n, p);
        return;
      default:
        break;
    }
  }
  const int64_t stride = t.col_stride;
  with_dtype(t.dtype, [&](auto type) {
    for (uint32_t i = 0; i < n; ++i) store_int(p + i * stride, type, in[i]);
  });
}

}  // namespace spyre::sim
