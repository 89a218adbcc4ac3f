#include "spyre/kernels/gather.h"

#include <map>

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/reduce.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

void check(const GatherShape& s) {
  const Matrix table = s.table.strided_form();
  if (table.row_dims.size() != 1) {
    throw KernelBuildError(
        "gather: the table needs exactly one row dimension (put the others "
        "in batch dimensions)");
  }
  if (s.index.dtype != rt::DType::kInt64 &&
      s.index.dtype != rt::DType::kInt32) {
    throw KernelBuildError("gather: indices must be int32 or int64");
  }
  if (s.out.rows != s.index.rows * s.index.cols || s.out.cols != s.table.cols ||
      s.out.dtype != s.table.dtype ||
      s.out.batch_count() != s.table.batch_count()) {
    throw KernelBuildError(
        rt::str("gather: out must be ", s.index.rows * s.index.cols, " x ",
                s.table.cols, " of the table's dtype and batches, got ",
                s.out.rows, " x ", s.out.cols));
  }
  if (s.out.rows == 0 || s.out.cols == 0) {
    throw KernelBuildError("a gather of nothing needs no program");
  }
}

}  // namespace

rt::Program build_gather(const GatherShape& s, const GatherOptions& o) {
  check(s);
  const uint32_t budget = o.target.scratchpad_budget();
  ProgramBuilder builder("gather", o.target.cores(), budget);
  builder.add_arg("table", s.table.dtype, s.table.bytes(), false);
  builder.add_arg("index", s.index.dtype, s.index.bytes(), false);
  builder.add_arg("out", s.out.dtype, s.out.bytes(), true);

  const uint32_t pitch = padded_row_bytes(s.table.cols, s.table.dtype);
  const uint64_t ei = s.index.elements_per_stick();
  // Index chunks of whole sticks, as many rows as fit double-buffered.
  const uint64_t fit = budget / (2 * (pitch + 8));
  if (fit < ei) {
    throw KernelBuildError(rt::str("gather: rows of ", s.table.cols,
                                   " elements do not fit the scratchpad"));
  }
  const std::vector<RowChunk> chunks =
      row_chunks(s.index, ei, o.target.cores(), std::min<uint64_t>(fit, 1024));
  const uint64_t widest = widest_chunk(chunks);
  const uint32_t index_bytes = padded_row_bytes(widest, s.index.dtype);
  const uint64_t sticks = s.table.sticks_per_row();

  struct Bufs {
    uint32_t index[2], rows[2];
  };
  std::map<uint32_t, Bufs> bufs;
  std::map<uint32_t, int> parity;
  for_each_chunk_on_cores(
      builder, chunks, [&](CoreBuilder& core, const RowChunk& chunk) {
        if (!bufs.count(core.core())) {
          Bufs b{};
          for (int i = 0; i < 2; ++i) {
            b.index[i] = core.reserve(index_bytes, "gather indices");
            b.rows[i] = core.reserve(static_cast<uint32_t>(widest * pitch),
                                     "gathered rows");
          }
          bufs[core.core()] = b;
        }
        const Bufs& b = bufs[core.core()];
        int& par = parity[core.core()];
        const uint32_t count = static_cast<uint32_t>(chunk.cols);
        core.load(s.index.tiles(1, chunk.row, 1, chunk.col0, chunk.cols,
                                b.index[par], index_bytes));
        for (uint64_t batch = 0; batch < s.table.batch_count(); ++batch) {
          const Matrix table = s.table.strided_form(batch);
          const bool contiguous_row = table.stick_stride == rt::kStickBytes;
          // One gather per stick column unless a row's sticks are contiguous.
          for (uint64_t st = 0; st < (contiguous_row ? 1 : sticks); ++st) {
            rt::DmaGather g;
            g.table = {0, table.offset + st * table.stick_stride};
            g.table_rows = table.rows;
            g.table_row_stride =
                static_cast<uint64_t>(table.row_dims[0].stride);
            g.row_bytes = static_cast<uint32_t>((contiguous_row ? sticks : 1) *
                                                rt::kStickBytes);
            g.index_spad = b.index[par];
            g.index_dtype = s.index.dtype;
            g.count = count;
            g.spad = b.rows[par] + static_cast<uint32_t>(st * rt::kStickBytes);
            g.spad_stride = pitch;
            core.emit(g);
          }
          core.store(s.out.tiles(2, chunk.row * s.index.cols + chunk.col0,
                                 count, 0, s.out.cols, b.rows[par], pitch,
                                 batch));
        }
        par ^= 1;
      });
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
