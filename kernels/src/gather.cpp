#include "spyre/kernels/gather.h"

#include <map>
#include <type_traits>

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/reduce.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

// The matrices of one row-indexed program, whichever way the rows move:
// `rows` is the gather's out or the scatter's source.
struct IndexedShape {
  const char* what;
  Matrix table, index, rows;
};

void check(const IndexedShape& s) {
  const Matrix table = s.table.strided_form();
  if (table.row_dims.size() != 1) {
    throw KernelBuildError(
        rt::str(s.what,
                ": the table needs exactly one row dimension (put the others "
                "in batch dimensions)"));
  }
  if (s.index.dtype != rt::DType::kInt64 &&
      s.index.dtype != rt::DType::kInt32) {
    throw KernelBuildError(rt::str(s.what, ": indices must be int32 or int64"));
  }
  if (s.rows.rows != s.index.rows * s.index.cols ||
      s.rows.cols != s.table.cols || s.rows.dtype != s.table.dtype ||
      s.rows.batch_count() != s.table.batch_count()) {
    throw KernelBuildError(
        rt::str(s.what, ": its rows must be ", s.index.rows * s.index.cols,
                " x ", s.table.cols, " of the table's dtype and batches, got ",
                s.rows.rows, " x ", s.rows.cols));
  }
  if (s.rows.rows == 0 || s.rows.cols == 0) {
    throw KernelBuildError(
        rt::str("a ", s.what, " of nothing needs no program"));
  }
}

// One program for both directions. Per chunk of the index on a core: load
// the chunk's indices, then per batch either gather the table rows and
// store them to out (slot 2), or load the source rows (slot 2) and scatter
// them into the table. One transfer per stick column unless a row's sticks
// are contiguous.
template <typename Transfer>
rt::Program build_indexed_rows(const IndexedShape& s, const Target& target) {
  constexpr bool kScatter = std::is_same_v<Transfer, rt::DmaScatter>;
  check(s);
  const uint32_t budget = target.scratchpad_budget();
  ProgramBuilder builder(s.what, target.cores(), budget);
  builder.add_arg("table", s.table.dtype, s.table.bytes(), kScatter);
  builder.add_arg("index", s.index.dtype, s.index.bytes(), false);
  builder.add_arg(kScatter ? "source" : "out", s.rows.dtype, s.rows.bytes(),
                  !kScatter);

  const uint32_t pitch = padded_row_bytes(s.table.cols, s.table.dtype);
  const uint64_t ei = s.index.elements_per_stick();
  // Index chunks of whole sticks, as many rows as fit double-buffered.
  const uint64_t fit = budget / (2 * (pitch + 8));
  if (fit < ei) {
    throw KernelBuildError(rt::str(s.what, ": rows of ", s.table.cols,
                                   " elements do not fit the scratchpad"));
  }
  const std::vector<RowChunk> chunks =
      row_chunks(s.index, ei, target.cores(), std::min<uint64_t>(fit, 1024));
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
            b.index[i] = core.reserve(index_bytes, "row indices");
            b.rows[i] = core.reserve(static_cast<uint32_t>(widest * pitch),
                                     "indexed rows");
          }
          bufs[core.core()] = b;
        }
        const Bufs& b = bufs[core.core()];
        int& par = parity[core.core()];
        const uint32_t count = static_cast<uint32_t>(chunk.cols);
        core.load(s.index.tiles(1, chunk.row, 1, chunk.col0, chunk.cols,
                                b.index[par], index_bytes));
        for (uint64_t batch = 0; batch < s.table.batch_count(); ++batch) {
          const auto rows_tiles =
              s.rows.tiles(2, chunk.row * s.index.cols + chunk.col0, count, 0,
                           s.rows.cols, b.rows[par], pitch, batch);
          if (kScatter) core.load(rows_tiles);
          const Matrix table = s.table.strided_form(batch);
          const bool contiguous_row = table.stick_stride == rt::kStickBytes;
          for (uint64_t st = 0; st < (contiguous_row ? 1 : sticks); ++st) {
            Transfer t;
            t.table = {0, table.offset + st * table.stick_stride};
            t.table_rows = table.rows;
            t.table_row_stride =
                static_cast<uint64_t>(table.row_dims[0].stride);
            t.row_bytes = static_cast<uint32_t>((contiguous_row ? sticks : 1) *
                                                rt::kStickBytes);
            t.index_spad = b.index[par];
            t.index_dtype = s.index.dtype;
            t.count = count;
            t.spad = b.rows[par] + static_cast<uint32_t>(st * rt::kStickBytes);
            t.spad_stride = pitch;
            core.emit(t);
          }
          if (!kScatter) core.store(rows_tiles);
        }
        par ^= 1;
      });
  return std::move(builder).finish();
}

}  // namespace

rt::Program build_gather(const GatherShape& s, const GatherOptions& o) {
  return build_indexed_rows<rt::DmaGather>({"gather", s.table, s.index, s.out},
                                           o.target);
}

rt::Program build_scatter(const ScatterShape& s, const GatherOptions& o) {
  return build_indexed_rows<rt::DmaScatter>(
      {"scatter", s.table, s.index, s.source}, o.target);
}

}  // namespace spyre::kernels
