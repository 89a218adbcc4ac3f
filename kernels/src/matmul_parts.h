// Pieces shared by the matrix-product builders (matmul.cpp, mlp.cpp): the
// plan-selection figures of the device and the fp32 epilogue on an
// accumulator tile. Internal to the kernel library.
#pragma once

#include <cstdint>

#include "spyre/kernels/matmul.h"
#include "spyre/kernels/program_builder.h"

namespace spyre::kernels::detail {

// The device's cost table, as plan selection asks it: estimated cycles of
// the instructions a plan would emit. The device's own model is the
// authority on modelled time; these only rank plans.
class DeviceFigures {
 public:
  explicit DeviceFigures(const rt::CostTable& costs) : c_(costs) {}
  const rt::CostTable& costs() const { return c_; }

  double macs_per_cycle(rt::DType dtype) const;
  // Cycles of one MatMul instruction of m x n x k (tile-quantised).
  double matmul_cycles(uint64_t m, uint64_t n, uint64_t k, rt::DType dtype,
                       bool transposed_b = false) const;
  // Cycles of a vector instruction over rows x cols of `width`-byte
  // elements; `factor` for transcendental or strided access.
  double vector_cycles(uint64_t rows, uint64_t cols, uint32_t width,
                       double factor = 1) const;
  // Cycles a core's DMA engine is busy with one transfer.
  double dma_cycles(uint64_t bytes, uint64_t runs) const {
    return static_cast<double>(bytes) / c_.dma_bytes_per_cycle +
           static_cast<double>(runs) + c_.dma_latency_cycles;
  }

 private:
  const rt::CostTable& c_;
};

rt::VecOp activation_op(Activation act);

// One K tile of a product into the fp32 accumulator at `acc`:
// acc (m x n) = a (m x k) @ b (k x n) for the first K tile (k0 == 0), and
// acc += a @ b for each later one.
inline void emit_matmul_tile(CoreBuilder& core, rt::Tile a, rt::Tile b,
                             rt::Tile acc, uint64_t m, uint64_t n, uint64_t k,
                             uint64_t k0) {
  rt::MatMul mm;
  mm.a = a;
  mm.b = b;
  mm.c = acc;
  mm.m = static_cast<uint32_t>(m);
  mm.n = static_cast<uint32_t>(n);
  mm.k = static_cast<uint32_t>(k);
  mm.accumulate = k0 > 0;
  core.emit(mm);
}

// The epilogue of one accumulator chunk: out = act(alpha * acc + beta *
// bias), computed in fp32 in place on `acc` and rounded once into `out`.
// `bias` (c's dtype, in the scratchpad; row stride 0 broadcasts one row) is
// used when `has_bias`. Returns the vector cycles it costs (for planning).
struct EpilogueMath {
  double alpha = 1;
  double beta = 1;
  Activation activation = Activation::kNone;
};
void emit_epilogue_math(CoreBuilder& core, const EpilogueMath& math,
                        rt::Tile acc, rt::Tile out, const rt::Tile* bias,
                        uint32_t rows, uint32_t cols);
double epilogue_cycles(const DeviceFigures& f, const EpilogueMath& math,
                       bool has_bias, uint64_t rows, uint64_t cols);

}  // namespace spyre::kernels::detail
