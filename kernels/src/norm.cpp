#include "spyre/kernels/norm.h"

#include <map>

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/reduce.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;

rt::Tile column(uint32_t offset) { return {offset, kF32, 4, 0}; }

void check(const NormShape& s, const NormOptions& o) {
  auto row_vector = [&](const std::optional<Matrix>& m, const char* what) {
    if (m && (m->rows != 1 || m->cols != s.in.cols)) {
      throw KernelBuildError(rt::str("norm: ", what, " must be 1 x ", s.in.cols,
                                     ", got ", m->rows, " x ", m->cols));
    }
  };
  if (s.in.rows != s.out.rows || s.in.cols != s.out.cols) {
    throw KernelBuildError("norm: input and output shapes differ");
  }
  if (!rt::is_floating(s.in.dtype) || s.in.dtype != s.out.dtype) {
    throw KernelBuildError(
        "norm needs a floating-point input and an output of the same dtype");
  }
  if (s.in.rows == 0 || s.in.cols == 0) {
    throw KernelBuildError("a norm of an empty tensor needs no program");
  }
  row_vector(s.weight, "weight");
  row_vector(s.bias, "bias");
  if (o.rms && (s.bias || s.mean)) {
    throw KernelBuildError("RMS norm has no bias and no mean");
  }
}

}  // namespace

rt::Program build_norm(const NormShape& s, const NormOptions& o) {
  check(s, o);
  const uint32_t budget = o.target.scratchpad_budget();
  ProgramBuilder builder(o.rms ? "rms_norm" : "layer_norm", o.target.cores(),
                         budget);
  builder.add_arg("input", s.in.dtype, s.in.bytes(), false);
  builder.add_arg("output", s.out.dtype, s.out.bytes(), true);
  auto optional_arg = [&](const std::optional<Matrix>& m, const char* name,
                          bool output) -> uint32_t {
    return m ? builder.add_arg(name, m->dtype, m->bytes(), output) : 0;
  };
  const uint32_t weight_slot = optional_arg(s.weight, "weight", false);
  const uint32_t bias_slot = optional_arg(s.bias, "bias", false);
  const uint32_t mean_slot = optional_arg(s.mean, "mean", true);
  const uint32_t rstd_slot = optional_arg(s.rstd, "rstd", true);

  // Rows are handed out as chunks of the stats' layout (whole sticks of it).
  const Matrix rows_in = s.in.strided_form();
  const uint64_t inner =
      rows_in.row_dims.empty() ? 1 : rows_in.row_dims.back().size;
  Matrix stats_shape = Matrix::strided(kF32, 0, {}, inner, rt::kStickBytes);
  stats_shape.rows = s.in.rows / inner;
  const rt::DType stats_t = s.rstd ? s.rstd->dtype : s.in.dtype;
  const std::vector<RowChunk> chunks = row_chunks(
      stats_shape, rt::elements_per_stick(stats_t), o.target.cores(), 256);
  const uint64_t widest = widest_chunk(chunks);
  const uint32_t cols = static_cast<uint32_t>(s.in.cols);
  const uint32_t in_pitch = padded_row_bytes(cols, s.in.dtype);
  const uint32_t work_pitch = padded_row_bytes(cols, kF32);
  const uint32_t param_pitch = padded_row_bytes(cols, s.in.dtype);
  // Per row: the input (double-buffered) and two fp32 rows.
  const uint64_t fixed =
      2 * param_pitch + 4 * rt::round_up_to_sticks(widest * 8);
  const uint64_t per_row = 2 * in_pitch + 2 * work_pitch;
  if (fixed + per_row > budget) {
    throw KernelBuildError(rt::str("norm: a row of ", cols,
                                   " elements does not fit the scratchpad"));
  }
  const uint64_t tile_rows =
      std::min<uint64_t>(widest, (budget - fixed) / per_row);

  struct Bufs {
    uint32_t in[2], work, sq, weight, bias, mean, rstd, staging;
  };
  std::map<uint32_t, Bufs> bufs;
  std::map<uint32_t, int> parity;
  const double n = static_cast<double>(cols);
  for_each_chunk_on_cores(
      builder, chunks, [&](CoreBuilder& core, const RowChunk& chunk) {
        if (!bufs.count(core.core())) {
          Bufs b{};
          for (uint32_t& in : b.in) {
            in = core.reserve(static_cast<uint32_t>(tile_rows * in_pitch),
                              "norm input");
          }
          b.work = core.reserve(static_cast<uint32_t>(tile_rows * work_pitch),
                                "fp32 work");
          b.sq = core.reserve(static_cast<uint32_t>(tile_rows * work_pitch),
                              "fp32 squares");
          b.mean = core.reserve(static_cast<uint32_t>(widest * 8), "row means");
          b.rstd = core.reserve(static_cast<uint32_t>(widest * 8), "row rstd");
          b.staging =
              core.reserve(static_cast<uint32_t>(widest * 8), "stats staging");
          if (s.weight) {
            b.weight = core.reserve(param_pitch, "weight");
            core.load(s.weight->tiles(weight_slot, 0, 1, 0, cols, b.weight,
                                      param_pitch));
          }
          if (s.bias) {
            b.bias = core.reserve(param_pitch, "bias");
            core.load(
                s.bias->tiles(bias_slot, 0, 1, 0, cols, b.bias, param_pitch));
          }
          bufs[core.core()] = b;
        }
        const Bufs& b = bufs[core.core()];
        int& par = parity[core.core()];
        for (uint64_t r0 = 0; r0 < chunk.cols; r0 += tile_rows) {
          const uint32_t nr =
              static_cast<uint32_t>(std::min(tile_rows, chunk.cols - r0));
          const uint32_t in_buf = b.in[par];
          core.load(s.in.tiles(0, chunk.row * inner + chunk.col0 + r0, nr, 0,
                               cols, in_buf, in_pitch));
          const rt::Tile x = spad_tile(in_buf, s.in.dtype, in_pitch);
          const rt::Tile work = spad_tile(b.work, kF32, work_pitch);
          const rt::Tile sq = spad_tile(b.sq, kF32, work_pitch);
          const rt::Tile mean = column(b.mean + static_cast<uint32_t>(r0 * 4));
          const rt::Tile rstd = column(b.rstd + static_cast<uint32_t>(r0 * 4));
          rt::Tile centred = x;
          if (!o.rms) {
            core.emit(row_reduce(rt::RedOp::kSum, mean, x, nr, cols));
            core.emit(vec_imm(rt::VecOp::kMul, mean, mean, 1 / n, nr, 1));
            core.emit(vec2(rt::VecOp::kSub, work, x, mean, nr, cols));
            centred = work;
          }
          core.emit(vec2(rt::VecOp::kMul, sq, centred, centred, nr, cols));
          core.emit(row_reduce(rt::RedOp::kSum, rstd, sq, nr, cols));
          // rstd = 1 / sqrt(sum / n + eps): biased variance, as PyTorch.
          core.emit(vec_imm(rt::VecOp::kMul, rstd, rstd, 1 / n, nr, 1));
          core.emit(vec_imm(rt::VecOp::kAdd, rstd, rstd, o.eps, nr, 1));
          core.emit(vec(rt::VecOp::kRsqrt, rstd, rstd, nr, 1));
          // The last step writes the output dtype over the input tile.
          const bool last_is_scale = !s.weight && !s.bias;
          const rt::Tile out_tile = spad_tile(in_buf, s.out.dtype, in_pitch);
          core.emit(vec2(rt::VecOp::kMul, last_is_scale ? out_tile : work,
                         centred, rstd, nr, cols));
          if (s.weight) {
            const rt::Tile w{
                b.weight, s.weight->dtype, 0,
                static_cast<int32_t>(rt::element_size(s.weight->dtype))};
            core.emit(vec2(rt::VecOp::kMul, s.bias ? work : out_tile, work, w,
                           nr, cols));
          }
          if (s.bias) {
            const rt::Tile bias{
                b.bias, s.bias->dtype, 0,
                static_cast<int32_t>(rt::element_size(s.bias->dtype))};
            core.emit(vec2(rt::VecOp::kAdd, out_tile, work, bias, nr, cols));
          }
          core.store(s.out.tiles(1, chunk.row * inner + chunk.col0 + r0, nr, 0,
                                 cols, in_buf, in_pitch));
          par ^= 1;
        }
        if (s.mean)
          store_chunk(core, *s.mean, mean_slot, chunk, b.mean, kF32, b.staging);
        if (s.rstd)
          store_chunk(core, *s.rstd, rstd_slot, chunk, b.rstd, kF32, b.staging);
      });
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
