#include "spyre/kernels/pack_rows.h"

#include <algorithm>

#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

struct PackShape {
  uint64_t group = 0;     // g: source rows per destination row
  uint32_t in_pitch = 0;  // scratchpad bytes per source row
  uint32_t out_pitch = 0;
};

PackShape pack_shape(const Matrix& in, const Matrix& out) {
  if (in.dtype != out.dtype || !in.batch_dims.empty() ||
      !out.batch_dims.empty() || in.cols == 0 || out.rows == 0 ||
      out.cols % in.cols != 0 || in.rows != out.rows * (out.cols / in.cols)) {
    throw KernelBuildError(rt::str("pack_rows: cannot pack a ", in.rows, "x",
                                   in.cols, " matrix into ", out.rows, "x",
                                   out.cols,
                                   " (rows of a whole number of source rows, "
                                   "one dtype, no batches)"));
  }
  return {out.cols / in.cols, padded_row_bytes(in.cols, in.dtype),
          padded_row_bytes(out.cols, out.dtype)};
}

// Destination rows [d0, d0 + n) of `core`: their source rows loaded, moved
// side by side, the packed rows stored.
void emit_chunk(CoreBuilder& core, const Matrix& in, const Matrix& out,
                const PackShape& s, uint32_t in_buf, uint32_t out_buf,
                uint64_t d0, uint64_t n) {
  core.load(
      in.tiles(0, d0 * s.group, n * s.group, 0, in.cols, in_buf, s.in_pitch));
  const uint32_t es = rt::element_size(in.dtype);
  for (uint64_t k = 0; k < s.group; ++k) {
    // Every g-th source row, from the k-th: position k of each packed row.
    const rt::Tile src =
        spad_tile(in_buf + static_cast<uint32_t>(k * s.in_pitch), in.dtype,
                  static_cast<uint32_t>(s.group * s.in_pitch));
    const rt::Tile dst =
        spad_tile(out_buf + static_cast<uint32_t>(k * in.cols * es), out.dtype,
                  s.out_pitch);
    core.emit(vec(rt::VecOp::kCopy, dst, src, static_cast<uint32_t>(n),
                  static_cast<uint32_t>(in.cols)));
  }
  core.store(out.tiles(1, d0, n, 0, out.cols, out_buf, s.out_pitch));
}

}  // namespace

rt::Program build_pack_rows(const Matrix& in, const Matrix& out,
                            const Target& target) {
  const PackShape s = pack_shape(in, out);
  ProgramBuilder builder(
      rt::str("pack_rows_", in.rows, "x", in.cols, "_g", s.group),
      target.cores(), target.scratchpad_budget());
  builder.add_arg("in", in.dtype, in.bytes(), false);
  builder.add_arg("out", out.dtype, out.bytes(), true);
  // Destination rows split among the cores; each core goes through its rows
  // in chunks that fit its scratchpad, through the same two buffers.
  const uint64_t row_bytes = s.group * s.in_pitch + s.out_pitch;
  const uint64_t fits = target.scratchpad_budget() / row_bytes;
  if (fits == 0) {
    throw KernelBuildError(rt::str("pack_rows: one packed row of ", out.cols,
                                   " elements needs ", row_bytes,
                                   " bytes of scratchpad"));
  }
  const Split rows{out.rows, builder.num_cores(), 1};
  for (uint32_t c = 0; c < rows.used_parts(); ++c) {
    const uint64_t mine = rows.size(c);
    const uint64_t chunk = std::min(mine, fits);
    CoreBuilder& core = builder.core(c);
    const uint32_t in_buf = core.reserve(
        static_cast<uint32_t>(chunk * s.group * s.in_pitch), "pack_rows in");
    const uint32_t out_buf = core.reserve(
        static_cast<uint32_t>(chunk * s.out_pitch), "pack_rows out");
    for (uint64_t d = 0; d < mine; d += chunk) {
      emit_chunk(core, in, out, s, in_buf, out_buf, rows.begin(c) + d,
                 std::min(chunk, mine - d));
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
