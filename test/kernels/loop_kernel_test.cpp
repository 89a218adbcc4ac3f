// The loop-kernel builder (spyre/kernels/loop_kernel.h) on the emulator
// against a double-precision reference: a pointwise chain, row reductions,
// a softmax fused from three nodes, a layer norm from welford parts, rows
// split into chunks, a full reduction over the ring, ragged shapes,
// fp16/bf16/fp32; and the errors the compiler relies on.
#include "spyre/kernels/loop_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "kernel_library_util.h"

namespace spyre::sim::test {
namespace {

using kernels::AccessVar;
using kernels::BufferAccess;
using kernels::LoopBuffer;
using kernels::LoopKernel;
using kernels::LoopOp;
using kernels::LoopOpKind;
using kernels::LoopRole;
using rt::DType;

// A buffer in the device's default stick layout of its host sizes: [h0 ..
// hk-1] as [h1 .. hk-2, ceil(hk-1 / E), h0, E] (torch_spyre layouts.py).
LoopBuffer buffer(std::string name, DType t, std::vector<int64_t> host,
                  bool is_output) {
  LoopBuffer b;
  b.name = std::move(name);
  b.dtype = t;
  b.is_output = is_output;
  b.host_sizes = host;
  const int64_t e = rt::elements_per_stick(t);
  const size_t rank = host.size();
  const int64_t sticks = rank ? (host.back() + e - 1) / e : 1;
  if (rank == 0) {
    b.device_size = {1, e};
  } else if (rank == 1) {
    b.device_size = {sticks, e};
  } else {
    b.device_size.assign(host.begin() + 1, host.end() - 1);
    b.device_size.insert(b.device_size.end(), {sticks, host[0], e});
  }
  std::vector<int64_t> strides(b.device_size.size());
  int64_t acc = rt::element_size(t);
  for (size_t i = strides.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= b.device_size[i];
  }
  b.device_bytes = static_cast<uint64_t>(acc);
  const size_t n = strides.size();
  b.stick_stride_bytes = rank >= 2 ? strides[n - 3] : strides[n - 2];
  for (size_t d = 0; d < rank; ++d) {
    b.dim_stride_bytes.push_back(d + 1 == rank ? 0
                                 : d == 0      ? strides[n - 2]
                                               : strides[d - 1]);
  }
  return b;
}

uint64_t offset(const LoopBuffer& b, const std::vector<int64_t>& coords) {
  if (coords.empty()) return 0;
  const int64_t e = b.per_stick();
  const int64_t last = coords.back();
  int64_t off =
      (last / e) * b.stick_stride_bytes + (last % e) * b.element_size();
  for (size_t d = 0; d + 1 < coords.size(); ++d) {
    off += coords[d] * b.dim_stride_bytes[d];
  }
  return static_cast<uint64_t>(off);
}

// Host images of a kernel's slots, element access by host coordinates.
struct Images {
  const LoopKernel& k;
  std::vector<std::vector<uint8_t>> bytes;
  explicit Images(const LoopKernel& kernel) : k(kernel) {
    for (const LoopBuffer& b : k.buffers) {
      bytes.emplace_back(rt::round_up_to_sticks(b.device_bytes), 0);
    }
  }
  double get(size_t slot, const std::vector<int64_t>& c) {
    const LoopBuffer& b = k.buffers[slot];
    uint8_t* p = bytes[slot].data() + offset(b, c);
    if (rt::is_floating(b.dtype)) return load_float(p, b.dtype);
    return static_cast<double>(load_int(p, b.dtype));
  }
  double put(size_t slot, const std::vector<int64_t>& c, double v) {
    const LoopBuffer& b = k.buffers[slot];
    store_float(bytes[slot].data() + offset(b, c), b.dtype,
                static_cast<float>(v));
    return get(slot, c);
  }
  // Builds the kernel for a fresh emulated device, runs it on the images
  // and reads every slot back; returns the builder's work division.
  kernels::LoopKernelSummary launch() {
    auto device = small_device();
    const kernels::LoopKernelProgram built = kernels::build_loop_kernel(
        k, {kernels::Target{device->properties().chip}});
    Buffers buffers(*device, built.program);
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i].resize(buffers.bindings[i].bytes);
      buffers.upload(i, bytes[i]);
    }
    run(*device, built.program, buffers);
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = buffers.download<uint8_t>(i);
    }
    return built.summary;
  }
};

BufferAccess rows_cols(int64_t row_dim = 0, int64_t col_dim = 1) {
  BufferAccess a;
  a.base = {0, 0};
  a.vars = {{LoopRole::kRow, 0, static_cast<uint32_t>(row_dim), 1},
            {LoopRole::kCol, 0, static_cast<uint32_t>(col_dim), 1}};
  return a;
}

BufferAccess rows_only() {
  BufferAccess a;
  a.base = {0};
  a.vars = {{LoopRole::kRow, 0, 0, 1}};
  return a;
}

// Appends an op; returns its id.
uint32_t add(LoopKernel& k, LoopOp op) {
  k.ops.push_back(std::move(op));
  return static_cast<uint32_t>(k.ops.size() - 1);
}

LoopOp load(uint32_t node, std::string buffer,
            std::optional<BufferAccess> access) {
  LoopOp op;
  op.kind = LoopOpKind::kLoad;
  op.node = node;
  op.buffer = std::move(buffer);
  op.access = std::move(access);
  return op;
}

LoopOp op(LoopOpKind kind, uint32_t node, std::string name,
          std::vector<uint32_t> args, DType dtype = DType::kFloat32) {
  LoopOp o;
  o.kind = kind;
  o.node = node;
  o.name = std::move(name);
  o.args = std::move(args);
  o.dtype = dtype;
  return o;
}

LoopOp constant(uint32_t node, double value) {
  LoopOp o;
  o.kind = LoopOpKind::kConstant;
  o.node = node;
  o.value = value;
  return o;
}

double tolerance(DType t, double want, double magnitude = 0) {
  return 2 * unit_roundoff(t) * std::fabs(want) + 1e-5 * (1 + magnitude);
}

class LoopKernelBuilder : public ::testing::TestWithParam<DType> {};

// out = (x * y + expm1(x)) * 0.5 - 1 / (|y| + 1) over [rows, cols]: loads
// shared by several ops, an immediate operand, a composed unary
void check_pointwise(DType t, int64_t rows, int64_t cols) {
  SCOPED_TRACE(rt::str(rows, " x ", cols));
  LoopKernel k;
  k.name = "pointwise";
  k.rows = rows;
  k.cols = cols;
  k.nodes = {{}};
  k.buffers = {buffer("x", t, {rows, cols}, false),
               buffer("y", t, {rows, cols}, false),
               buffer("out", t, {rows, cols}, true)};
  const uint32_t x = add(k, load(0, "x", rows_cols()));
  const uint32_t y = add(k, load(0, "y", rows_cols()));
  const uint32_t prod = add(k, op(LoopOpKind::kBinary, 0, "mul", {x, y}));
  const uint32_t em1 = add(k, op(LoopOpKind::kUnary, 0, "expm1", {x}));
  const uint32_t sum = add(k, op(LoopOpKind::kBinary, 0, "add", {prod, em1}));
  const uint32_t half = add(k, constant(0, 0.5));
  const uint32_t scaled =
      add(k, op(LoopOpKind::kBinary, 0, "mul", {half, sum}));  // swapped
  const uint32_t one = add(k, constant(0, 1));
  const uint32_t ay = add(k, op(LoopOpKind::kUnary, 0, "abs", {y}));
  const uint32_t den = add(k, op(LoopOpKind::kBinary, 0, "add", {ay, one}));
  const uint32_t inv = add(k, op(LoopOpKind::kUnary, 0, "recip", {den}));
  const uint32_t out = add(k, op(LoopOpKind::kBinary, 0, "sub", {scaled, inv}));
  k.stores = {{0, out, "out", rows_cols()}};
  Images im(k);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> dist(-2, 2);
  std::vector<double> xs, ys;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      xs.push_back(im.put(0, {r, c}, dist(rng)));
      ys.push_back(im.put(1, {r, c}, dist(rng)));
    }
  }
  im.launch();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double a = xs[r * cols + c], b = ys[r * cols + c];
      const double want =
          (a * b + std::expm1(a)) * 0.5 - 1 / (std::fabs(b) + 1);
      ASSERT_NEAR(im.get(2, {r, c}), want, tolerance(t, want, 4))
          << "out[" << r << ", " << c << "]";
    }
  }
}

TEST_P(LoopKernelBuilder, PointwiseChainRaggedShapes) {
  check_pointwise(GetParam(), 37, 301);
  check_pointwise(GetParam(), 1, 5);
  check_pointwise(GetParam(), 300, 1000);  // several blocks per core
}

// out[r] = op(x[r, :]) for sum and max
TEST_P(LoopKernelBuilder, RowReductions) {
  const DType t = GetParam();
  for (const char* name : {"sum", "max"}) {
    SCOPED_TRACE(name);
    const int64_t rows = 45, cols = 333;
    LoopKernel k;
    k.name = "reduce";
    k.rows = rows;
    k.cols = cols;
    k.nodes = {{}};
    k.buffers = {buffer("x", t, {rows, cols}, false),
                 buffer("out", t, {rows}, true)};
    const uint32_t x = add(k, load(0, "x", rows_cols()));
    const uint32_t red = add(k, op(LoopOpKind::kReduction, 0, name, {x}));
    k.stores = {{0, red, "out", rows_only()}};
    Images im(k);
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<double> want(rows, std::string(name) == "sum" ? 0 : -1e30);
    std::vector<double> magnitude(rows, 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double v = im.put(0, {r, c}, dist(rng));
        want[r] =
            std::string(name) == "sum" ? want[r] + v : std::max(want[r], v);
        magnitude[r] += std::fabs(v);
      }
    }
    im.launch();
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_NEAR(im.get(1, {r}), want[r], tolerance(t, want[r], magnitude[r]))
          << "out[" << r << "]";
    }
  }
}

// softmax over the rows of x fused from three nodes, as the compiler fuses
// it: amax = max(x); sum = sum(exp(x - amax)); out = exp(x - amax) / sum.
// amax and sum stay in the scratchpad (no slots).
TEST_P(LoopKernelBuilder, SoftmaxFusedFromThreeNodes) {
  const DType t = GetParam();
  const int64_t rows = 19, cols = 200;
  LoopKernel k;
  k.name = "softmax";
  k.rows = rows;
  k.cols = cols;
  k.nodes = {{}, {}, {}};
  k.buffers = {buffer("x", t, {rows, cols}, false),
               buffer("out", t, {rows, cols}, true)};
  const auto shifted_exp = [&](uint32_t node) {
    const uint32_t x = add(k, load(node, "x", rows_cols()));
    const uint32_t m = add(k, load(node, "amax", std::nullopt));
    const uint32_t d = add(k, op(LoopOpKind::kBinary, node, "sub", {x, m}));
    return add(k, op(LoopOpKind::kUnary, node, "exp", {d}));
  };
  const uint32_t x0 = add(k, load(0, "x", rows_cols()));
  const uint32_t amax = add(k, op(LoopOpKind::kReduction, 0, "max", {x0}));
  k.stores.push_back({0, amax, "amax", std::nullopt});
  const uint32_t e1 = shifted_exp(1);
  const uint32_t sum = add(k, op(LoopOpKind::kReduction, 1, "sum", {e1}));
  k.stores.push_back({1, sum, "sum", std::nullopt});
  const uint32_t e2 = shifted_exp(2);
  const uint32_t s2 = add(k, load(2, "sum", std::nullopt));
  const uint32_t out = add(k, op(LoopOpKind::kBinary, 2, "div", {e2, s2}));
  k.stores.push_back({2, out, "out", rows_cols()});
  Images im(k);
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> dist(-3, 3);
  std::vector<double> xs;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      xs.push_back(im.put(0, {r, c}, dist(rng)));
  }
  im.launch();
  for (int64_t r = 0; r < rows; ++r) {
    const double m =
        *std::max_element(xs.begin() + r * cols, xs.begin() + (r + 1) * cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xs[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) {
      const double want = std::exp(xs[r * cols + c] - m) / s;
      ASSERT_NEAR(im.get(1, {r, c}), want, tolerance(t, want))
          << "out[" << r << ", " << c << "]";
    }
  }
}

// sum of all of x [a, cols]: the reduced-outer dim over the cores, partials
// combined over the ring
TEST_P(LoopKernelBuilder, FullReductionOverTheRing) {
  const DType t = GetParam();
  const int64_t a = 50, cols = 130;
  LoopKernel k;
  k.name = "total";
  k.cols = cols;
  k.nodes = {{{a}}};
  k.buffers = {buffer("x", t, {a, cols}, false), buffer("out", t, {}, true)};
  BufferAccess xa;
  xa.base = {0, 0};
  xa.vars = {{LoopRole::kReduced, 0, 0, 1}, {LoopRole::kCol, 0, 1, 1}};
  const uint32_t x = add(k, load(0, "x", xa));
  const uint32_t red = add(k, op(LoopOpKind::kReduction, 0, "sum", {x}));
  k.stores = {{0, red, "out", BufferAccess{}}};
  Images im(k);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  double want = 0, magnitude = 0;
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = im.put(0, {i, c}, dist(rng));
      want += v;
      magnitude += std::fabs(v);
    }
  }
  const kernels::LoopKernelSummary s = im.launch();
  EXPECT_TRUE(s.cross_core_reduction);
  EXPECT_GT(s.cores, 1u);
  EXPECT_NEAR(im.get(1, {}), want, tolerance(t, want, magnitude));
}

// layer norm without affine, as the compiler fuses it: a welford reduction
// (mean and m2 kept in the scratchpad), then (x - mean) * rsqrt(m2 / n + eps)
TEST_P(LoopKernelBuilder, LayerNormFromWelfordParts) {
  const DType t = GetParam();
  const int64_t rows = 21, cols = 150;
  const double eps = 1e-5;
  LoopKernel k;
  k.name = "layer_norm";
  k.rows = rows;
  k.cols = cols;
  k.nodes = {{}, {}};
  k.buffers = {buffer("x", t, {rows, cols}, false),
               buffer("out", t, {rows, cols}, true)};
  const uint32_t x0 = add(k, load(0, "x", rows_cols()));
  for (uint32_t part : {0u, 1u}) {
    LoopOp red = op(LoopOpKind::kReduction, 0, "welford_reduce", {x0});
    red.part = part;
    k.stores.push_back(
        {0, add(k, red), part == 0 ? "mean" : "m2", std::nullopt});
  }
  const uint32_t x1 = add(k, load(1, "x", rows_cols()));
  const uint32_t mean = add(k, load(1, "mean", std::nullopt));
  const uint32_t m2 = add(k, load(1, "m2", std::nullopt));
  const uint32_t d = add(k, op(LoopOpKind::kBinary, 1, "sub", {x1, mean}));
  const uint32_t n = add(k, constant(1, static_cast<double>(cols)));
  const uint32_t var = add(k, op(LoopOpKind::kBinary, 1, "div", {m2, n}));
  const uint32_t e = add(k, constant(1, eps));
  const uint32_t ve = add(k, op(LoopOpKind::kBinary, 1, "add", {var, e}));
  const uint32_t r = add(k, op(LoopOpKind::kUnary, 1, "rsqrt", {ve}));
  const uint32_t y = add(k, op(LoopOpKind::kBinary, 1, "mul", {d, r}));
  k.stores.push_back({1, y, "out", rows_cols()});
  Images im(k);
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> dist(-3, 3);
  std::vector<double> xs;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c)
      xs.push_back(im.put(0, {i, c}, dist(rng)));
  }
  im.launch();
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += xs[i * cols + c] / cols;
    for (int64_t c = 0; c < cols; ++c) {
      v += (xs[i * cols + c] - m) * (xs[i * cols + c] - m) / cols;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double want = (xs[i * cols + c] - m) / std::sqrt(v + eps);
      ASSERT_NEAR(im.get(1, {i, c}), want, tolerance(t, want, 4))
          << "out[" << i << ", " << c << "]";
    }
  }
}

// rows longer than a block, walked in chunks of 4096 columns as the
// compiler splits them: x[o, 4096 * q + k] with a shorter last chunk
TEST_P(LoopKernelBuilder, LongRowsInChunksWithATail) {
  const DType t = GetParam();
  const int64_t outer = 2, n = 10000, chunk = 4096;
  LoopKernel k;
  k.name = "long_rows";
  k.outer = {outer};
  k.rows = (n + chunk - 1) / chunk;
  k.cols = chunk;
  k.col_tail = n - (*k.rows - 1) * chunk;
  k.nodes = {{}};
  k.buffers = {buffer("x", t, {outer, n}, false),
               buffer("out", t, {outer, n}, true)};
  BufferAccess a;
  a.base = {0, 0};
  a.vars = {{LoopRole::kOuter, 0, 0, 1},
            {LoopRole::kRow, 0, 1, chunk},
            {LoopRole::kCol, 0, 1, 1}};
  const uint32_t x = add(k, load(0, "x", a));
  const uint32_t y = add(k, op(LoopOpKind::kUnary, 0, "sigmoid", {x}));
  k.stores = {{0, y, "out", a}};
  Images im(k);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-4, 4);
  std::vector<double> xs;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < n; ++c) xs.push_back(im.put(0, {o, c}, dist(rng)));
  }
  const kernels::LoopKernelSummary s = im.launch();
  EXPECT_EQ(s.blocks, static_cast<uint64_t>(outer * *k.rows));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < n; ++c) {
      const double want = 1 / (1 + std::exp(-xs[o * n + c]));
      ASSERT_NEAR(im.get(1, {o, c}), want, tolerance(t, want))
          << "out[" << o << ", " << c << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoopKernelBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(LoopKernelBuilderErrors, WhatTheCompilerFallsBackOn) {
  auto device = small_device();
  const DType t = DType::kFloat32;
  // a store into every other element of the sticks (no device lowering)
  LoopKernel k;
  k.name = "strided";
  k.rows = 8;
  k.cols = 64;
  k.nodes = {{}};
  k.buffers = {buffer("x", t, {8, 64}, false),
               buffer("out", t, {8, 128}, true)};
  const uint32_t x = add(k, load(0, "x", rows_cols()));
  BufferAccess every_other = rows_cols();
  every_other.vars[1].step = 2;
  k.stores = {{0, x, "out", every_other}};
  EXPECT_THROW(kernels::build_loop_kernel(
                   k, {kernels::Target{device->properties().chip}}),
               kernels::KernelBuildError);
  // rows too long for any block: a LoopKernelTooLarge (the compiler splits)
  k.name = "huge";
  k.rows = 2;
  k.cols = 1 << 20;
  k.buffers = {buffer("x", t, {2, 1 << 20}, false),
               buffer("out", t, {2, 1 << 20}, true)};
  k.stores = {{0, x, "out", rows_cols()}};
  EXPECT_THROW(kernels::build_loop_kernel(
                   k, {kernels::Target{device->properties().chip}}),
               kernels::LoopKernelTooLarge);
  // an op the device cannot do
  k.rows = 2;
  k.cols = 64;
  k.buffers = {buffer("x", t, {2, 64}, false), buffer("out", t, {2, 64}, true)};
  const uint32_t bad = add(k, op(LoopOpKind::kUnary, 0, "lgamma", {x}));
  k.stores = {{0, bad, "out", rows_cols()}};
  EXPECT_THROW(kernels::build_loop_kernel(
                   k, {kernels::Target{device->properties().chip}}),
               kernels::KernelBuildError);
  // an arg referring to a later op
  k.ops.push_back(op(LoopOpKind::kUnary, 0, "exp", {99}));
  EXPECT_THROW(kernels::validate_loop_kernel(k), kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
