#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>

#include "kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

// Rough figures for plan selection only; the emulator's timing table is the
// authority on modelled time.
constexpr double kMacsPerCycle = 1024;
constexpr double kDramBytesPerCycle = 136;
constexpr rt::DType kF32 = rt::DType::kFloat32;

uint64_t round_up(uint64_t v, uint64_t q) { return ceil_div(v, q) * q; }

// Rows of M handed to one core start a stick when A is stored transposed
// (M then runs along A's sticks).
uint64_t m_quantum(const MatmulShape& s) {
  return s.a_transposed ? rt::elements_per_stick(s.a.dtype) : 1;
}

bool bias_is_row_broadcast(const MatmulShape& s) {
  if (!s.bias) return false;
  const Matrix m = s.bias->strided_form();
  return std::all_of(m.row_dims.begin(), m.row_dims.end(),
                     [](const StridedDim& d) { return d.stride == 0; });
}

struct TileBytes {
  uint64_t a, b, acc, out, bias_row;
  uint64_t total() const { return 2 * a + 2 * b + acc + out + bias_row; }
};

TileBytes tile_bytes(const MatmulShape& s, uint64_t tm, uint64_t tn,
                     uint64_t tk) {
  return {s.a_transposed ? tk * padded_row_bytes(tm, s.a.dtype)
                         : tm * padded_row_bytes(tk, s.a.dtype),
          s.b_transposed ? tn * padded_row_bytes(tk, s.b.dtype)
                         : tk * padded_row_bytes(tn, s.b.dtype),
          tm * padded_row_bytes(tn, kF32), tm * padded_row_bytes(tn, s.c.dtype),
          bias_is_row_broadcast(s) ? padded_row_bytes(tn, s.c.dtype) : 0};
}

void check_shapes(const MatmulShape& s) {
  if (s.k() != s.b_k() || s.m() != s.c.rows || s.n() != s.c.cols) {
    throw KernelBuildError(rt::str("matmul shapes disagree: A ", s.m(), "x",
                                   s.k(), ", B ", s.b_k(), "x", s.n(), ", C ",
                                   s.c.rows, "x", s.c.cols));
  }
  if (s.a.dtype != s.b.dtype) {
    throw KernelBuildError("matmul operands must share a dtype");
  }
  if (s.m() == 0 || s.n() == 0 || s.k() == 0) {
    throw KernelBuildError("matmul of an empty matrix needs no program");
  }
  const uint64_t batches = s.c.batch_count();
  if (s.a.batch_count() != batches || s.b.batch_count() != batches) {
    throw KernelBuildError(rt::str("matmul batch sizes disagree: A ",
                                   s.a.batch_count(), ", B ", s.b.batch_count(),
                                   ", C ", batches));
  }
  if (s.bias) {
    if (s.bias->rows != s.c.rows || s.bias->cols != s.c.cols ||
        s.bias->dtype != s.c.dtype || s.bias->batch_count() != batches) {
      throw KernelBuildError(
          "matmul bias must have C's shape, dtype and batch (use stride-0 rows "
          "to broadcast one row)");
    }
  }
}

// Largest sub-block that fits: prefer a deep K tile, then square-ish M x N.
void choose_tiles(const MatmulShape& s, MatmulPlan& plan, uint64_t budget) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  const uint64_t ek = rt::elements_per_stick(s.a.dtype);
  const uint64_t qm = std::max<uint64_t>(m_quantum(s), 1);
  const uint64_t min_m = std::max<uint64_t>(qm, 1);
  uint64_t tm = std::min<uint64_t>(round_up(plan.block_m, qm), 512);
  uint64_t tn = std::min<uint64_t>(round_up(plan.block_n, en), 512);
  uint64_t tk = std::min<uint64_t>(round_up(s.k(), ek), 256);
  while (tile_bytes(s, tm, tn, tk).total() > budget) {
    if (tm >= tn && tm > std::max<uint64_t>(32, min_m)) {
      tm = std::max<uint64_t>(std::max<uint64_t>(32, min_m),
                              round_up(tm / 2, qm));
    } else if (tn > en) {
      tn = std::max<uint64_t>(en, round_up(tn / 2, en));
    } else if (tk > ek) {
      tk = std::max<uint64_t>(ek, round_up(tk / 2, ek));
    } else if (tm > min_m) {
      tm = std::max<uint64_t>(min_m, round_up(tm / 2, qm));
    } else {
      throw KernelBuildError(
          rt::str("matmul: even a ", tm, "x", tn, "x", tk, " tile needs ",
                  tile_bytes(s, tm, tn, tk).total(),
                  " bytes of scratchpad, over the ", budget, " available"));
    }
  }
  plan.tile_m = std::min(tm, plan.block_m);
  plan.tile_n = std::min(tn, plan.block_n);
  plan.tile_k = std::min(tk, s.k());
}

double plan_cost(const MatmulShape& s, uint32_t gm, uint32_t gn) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  Split ms{s.m(), gm, m_quantum(s)}, ns{s.n(), gn, en};
  if (ms.used_parts() != gm || ns.used_parts() != gn) {
    return std::numeric_limits<double>::infinity();
  }
  const double m = static_cast<double>(s.m());
  const double n = static_cast<double>(s.n());
  const double k = static_cast<double>(s.k());
  const double bm = static_cast<double>(round_up(ms.chunk(), 32));
  const double bn = static_cast<double>(round_up(ns.chunk(), 64));
  const double compute = bm * bn * k / kMacsPerCycle;
  const double elem = rt::element_size(s.a.dtype);
  // A is read once per grid column (shared by up to 8 cores of a row).
  const double traffic =
      (m * k * ceil_div(gn, 8) + k * n * ceil_div(gm, 8)) * elem +
      m * n * rt::element_size(s.c.dtype);
  return std::max(compute, traffic / kDramBytesPerCycle) + compute * 0.05;
}

}  // namespace

std::string MatmulPlan::describe() const {
  return rt::str("grid ", grid_m, "x", grid_n, ", block ", block_m, "x",
                 block_n, ", tile ", tile_m, "x", tile_n, "x", tile_k,
                 groups > 1 ? rt::str(", ", groups, " batch groups") : "");
}

MatmulPlan plan_matmul(const MatmulShape& s, const MatmulOptions& options) {
  check_shapes(s);
  const uint64_t batches = s.batch_count();
  const uint32_t cores_per_product =
      batches >= options.max_cores
          ? 1
          : static_cast<uint32_t>(options.max_cores / batches);
  MatmulPlan best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (uint32_t gm = 1; gm <= cores_per_product; ++gm) {
    for (uint32_t gn = 1; gm * gn <= cores_per_product; ++gn) {
      double cost = plan_cost(s, gm, gn);
      if (cost < best_cost) {
        best_cost = cost;
        best.grid_m = gm;
        best.grid_n = gn;
      }
    }
  }
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  best.block_m = Split{s.m(), best.grid_m, m_quantum(s)}.chunk();
  best.block_n = Split{s.n(), best.grid_n, en}.chunk();
  best.groups = static_cast<uint32_t>(std::min<uint64_t>(
      batches, options.max_cores / (best.grid_m * best.grid_n)));
  choose_tiles(s, best, options.scratchpad_bytes - options.scratchpad_reserve);
  return best;
}

namespace {

struct CoreBlock {
  uint64_t batch;
  uint64_t m0, m, n0, n;
  uint32_t grid_row, grid_col;
};

struct Buffers {
  uint32_t a[2], b[2], acc, out, bias_row;
  uint32_t a_pitch, b_pitch, acc_pitch, out_pitch;
};

Buffers reserve_buffers(CoreBuilder& core, const MatmulShape& s,
                        const MatmulPlan& p) {
  Buffers buf{};
  const TileBytes bytes = tile_bytes(s, p.tile_m, p.tile_n, p.tile_k);
  buf.a_pitch = s.a_transposed ? padded_row_bytes(p.tile_m, s.a.dtype)
                               : padded_row_bytes(p.tile_k, s.a.dtype);
  buf.b_pitch = s.b_transposed ? padded_row_bytes(p.tile_k, s.b.dtype)
                               : padded_row_bytes(p.tile_n, s.b.dtype);
  buf.acc_pitch = padded_row_bytes(p.tile_n, kF32);
  buf.out_pitch = padded_row_bytes(p.tile_n, s.c.dtype);
  for (int i = 0; i < 2; ++i) {
    buf.a[i] = core.reserve(static_cast<uint32_t>(bytes.a), "matmul A tile");
    buf.b[i] = core.reserve(static_cast<uint32_t>(bytes.b), "matmul B tile");
  }
  buf.acc =
      core.reserve(static_cast<uint32_t>(bytes.acc), "matmul accumulator");
  buf.out =
      core.reserve(static_cast<uint32_t>(bytes.out), "matmul output tile");
  if (bytes.bias_row > 0) {
    buf.bias_row =
        core.reserve(static_cast<uint32_t>(bytes.bias_row), "matmul bias row");
  }
  return buf;
}

// Cores that issue an identical read get the same share-group id: the key
// is the operand, the product, the grid line (at most 8 cores share a read),
// the sub-block and K step, and the scratchpad offset (equal only when the
// cores are in step, which ragged edge blocks may not be).
struct ShareGroups {
  ProgramBuilder& builder;
  std::map<std::array<uint64_t, 7>, uint32_t> ids;
  uint32_t get(const std::array<uint64_t, 7>& key) {
    auto [it, inserted] = ids.try_emplace(key, 0);
    if (inserted) it->second = builder.new_share_group();
    return it->second;
  }
};

// A read shared only when it is one transfer (a group names one read).
void load_shared(CoreBuilder& core,
                 const std::vector<rt::StickTransfer>& transfers,
                 ShareGroups* groups, bool share,
                 const std::array<uint64_t, 7>& key) {
  const bool shared = groups != nullptr && share && transfers.size() == 1;
  core.load(transfers, shared ? groups->get(key) : 0);
}

int32_t esize(rt::DType t) { return static_cast<int32_t>(rt::element_size(t)); }

// alpha * acc (+ beta * bias) rounded once into the output tile.
void emit_epilogue(CoreBuilder& core, const MatmulShape& s, const Buffers& buf,
                   const CoreBlock& blk, uint64_t mi, uint64_t ni, uint64_t tm,
                   uint64_t tn) {
  const rt::Tile acc = spad_tile(buf.acc, kF32, buf.acc_pitch);
  const rt::Tile out = spad_tile(buf.out, s.c.dtype, buf.out_pitch);
  rt::Vector v;
  v.rows = static_cast<uint32_t>(tm);
  v.cols = static_cast<uint32_t>(tn);
  v.dst = out;
  v.src0 = acc;
  if (!s.bias) {
    v.op = s.alpha == 1 ? rt::VecOp::kCopy : rt::VecOp::kMul;
    v.src1_is_imm = true;
    v.imm = s.alpha;
    core.emit(v);
    return;
  }
  if (s.alpha != 1) {
    rt::Vector scale = v;
    scale.op = rt::VecOp::kMul;
    scale.dst = acc;
    scale.src1_is_imm = true;
    scale.imm = s.alpha;
    core.emit(scale);
  }
  rt::Tile bias = out;
  uint32_t bias_rows = v.rows;
  if (bias_is_row_broadcast(s)) {
    core.load(s.bias->tiles(3, 0, 1, blk.n0 + ni, tn, buf.bias_row,
                            buf.out_pitch, blk.batch));
    bias = {buf.bias_row, s.c.dtype, 0, esize(s.c.dtype)};
    bias_rows = 1;
  } else {
    core.load(s.bias->tiles(3, blk.m0 + mi, tm, blk.n0 + ni, tn, buf.out,
                            buf.out_pitch, blk.batch));
  }
  if (s.beta != 1) {
    rt::Vector scale = v;
    scale.op = rt::VecOp::kMul;
    scale.rows = bias_rows;
    scale.dst = {bias.offset, bias.dtype, bias_rows == 1 ? 0 : bias.row_stride,
                 bias.col_stride};
    scale.src0 = scale.dst;
    scale.src1_is_imm = true;
    scale.imm = s.beta;
    core.emit(scale);
  }
  v.op = rt::VecOp::kAdd;
  v.src1 = bias;
  core.emit(v);
}

void emit_core_block(CoreBuilder& core, const Buffers& buf,
                     const MatmulShape& s, const MatmulPlan& p,
                     const CoreBlock& blk, ShareGroups* groups, int& parity) {
  const uint64_t k_total = s.k();
  for (uint64_t mi = 0; mi < blk.m; mi += p.tile_m) {
    const uint64_t tm = std::min(p.tile_m, blk.m - mi);
    for (uint64_t ni = 0; ni < blk.n; ni += p.tile_n) {
      const uint64_t tn = std::min(p.tile_n, blk.n - ni);
      for (uint64_t k0 = 0; k0 < k_total; k0 += p.tile_k) {
        const uint64_t tk = std::min(p.tile_k, k_total - k0);
        const uint64_t m_at = blk.m0 + mi, n_at = blk.n0 + ni;
        load_shared(core,
                    s.a_transposed
                        ? s.a.tiles(0, k0, tk, m_at, tm, buf.a[parity],
                                    buf.a_pitch, blk.batch)
                        : s.a.tiles(0, m_at, tm, k0, tk, buf.a[parity],
                                    buf.a_pitch, blk.batch),
                    groups, p.grid_n > 1,
                    {0, blk.batch, blk.grid_row * 64u + blk.grid_col / 8, mi,
                     ni, k0, buf.a[parity]});
        load_shared(core,
                    s.b_transposed
                        ? s.b.tiles(1, n_at, tn, k0, tk, buf.b[parity],
                                    buf.b_pitch, blk.batch)
                        : s.b.tiles(1, k0, tk, n_at, tn, buf.b[parity],
                                    buf.b_pitch, blk.batch),
                    groups, p.grid_m > 1,
                    {1, blk.batch, blk.grid_col * 64u + blk.grid_row / 8, mi,
                     ni, k0, buf.b[parity]});
        rt::MatMul mm;
        mm.a = spad_tile(buf.a[parity], s.a.dtype, buf.a_pitch);
        if (s.a_transposed) mm.a = transposed(mm.a);
        mm.b = spad_tile(buf.b[parity], s.b.dtype, buf.b_pitch);
        if (s.b_transposed) mm.b = transposed(mm.b);
        mm.c = spad_tile(buf.acc, kF32, buf.acc_pitch);
        mm.m = static_cast<uint32_t>(tm);
        mm.n = static_cast<uint32_t>(tn);
        mm.k = static_cast<uint32_t>(tk);
        mm.accumulate = k0 > 0;
        core.emit(mm);
        parity ^= 1;
      }
      emit_epilogue(core, s, buf, blk, mi, ni, tm, tn);
      core.store(s.c.tiles(2, blk.m0 + mi, tm, blk.n0 + ni, tn, buf.out,
                           buf.out_pitch, blk.batch));
    }
  }
}

}  // namespace

rt::Program build_matmul(const MatmulShape& s, const MatmulPlan& p,
                         const MatmulOptions& options) {
  check_shapes(s);
  const uint32_t product_cores = p.grid_m * p.grid_n;
  if (product_cores * std::max<uint32_t>(p.groups, 1) > options.max_cores) {
    throw KernelBuildError(rt::str("matmul plan ", p.describe(), " needs ",
                                   product_cores * p.groups, " cores, only ",
                                   options.max_cores, " available"));
  }
  ProgramBuilder builder(rt::str(s.batch_count() > 1 ? "bmm_" : "matmul_",
                                 s.m(), "x", s.k(), "x", s.n()),
                         options.max_cores,
                         options.scratchpad_bytes - options.scratchpad_reserve);
  builder.add_arg("a", s.a.dtype, s.a.bytes(), false);
  builder.add_arg("b", s.b.dtype, s.b.bytes(), false);
  builder.add_arg("c", s.c.dtype, s.c.bytes(), true);
  if (s.bias) builder.add_arg("bias", s.c.dtype, s.bias->bytes(), false);
  ShareGroups groups{builder, {}};
  std::map<uint32_t, Buffers> buffers;
  std::map<uint32_t, int> parity;
  const Split ms{s.m(), p.grid_m, m_quantum(s)};
  const Split ns{s.n(), p.grid_n, rt::elements_per_stick(s.c.dtype)};
  const uint32_t group_count = std::max<uint32_t>(p.groups, 1);
  for (uint64_t batch = 0; batch < s.batch_count(); ++batch) {
    const uint32_t first_core =
        static_cast<uint32_t>(batch % group_count) * product_cores;
    for (uint32_t gr = 0; gr < p.grid_m; ++gr) {
      for (uint32_t gc = 0; gc < p.grid_n; ++gc) {
        CoreBlock blk{batch,       ms.begin(gr), ms.size(gr), ns.begin(gc),
                      ns.size(gc), gr,           gc};
        if (blk.m == 0 || blk.n == 0) continue;
        // Cores of a grid row sit next to each other on the ring.
        const uint32_t id = first_core + gr * p.grid_n + gc;
        CoreBuilder& core = builder.core(id);
        if (!buffers.count(id)) buffers[id] = reserve_buffers(core, s, p);
        emit_core_block(core, buffers[id], s, p, blk,
                        options.share_reads ? &groups : nullptr, parity[id]);
      }
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
