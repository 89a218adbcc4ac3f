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

uint64_t round_up(uint64_t v, uint64_t q) { return ceil_div(v, q) * q; }

struct TileBytes {
  uint64_t a, b, acc, out;
  uint64_t total() const { return 2 * a + 2 * b + acc + out; }
};

TileBytes tile_bytes(const MatmulShape& s, uint64_t tm, uint64_t tn,
                     uint64_t tk) {
  return {tm * padded_row_bytes(tk, s.a.dtype),
          tk * padded_row_bytes(tn, s.b.dtype),
          tm * padded_row_bytes(tn, rt::DType::kFloat32),
          tm * padded_row_bytes(tn, s.c.dtype)};
}

void check_shapes(const MatmulShape& s) {
  if (s.a.cols != s.b.rows || s.a.rows != s.c.rows || s.b.cols != s.c.cols) {
    throw KernelBuildError(rt::str("matmul shapes disagree: A ", s.a.rows, "x",
                                   s.a.cols, ", B ", s.b.rows, "x", s.b.cols,
                                   ", C ", s.c.rows, "x", s.c.cols));
  }
  if (s.a.dtype != s.b.dtype) {
    throw KernelBuildError("matmul operands must share a dtype");
  }
  if (s.a.rows == 0 || s.b.cols == 0 || s.a.cols == 0) {
    throw KernelBuildError("matmul of an empty matrix needs no program");
  }
}

// Largest sub-block that fits: prefer a deep K tile, then square-ish M x N.
void choose_tiles(const MatmulShape& s, MatmulPlan& plan, uint64_t budget) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  const uint64_t ek = rt::elements_per_stick(s.a.dtype);
  uint64_t tm = std::min<uint64_t>(plan.block_m, 512);
  uint64_t tn = std::min<uint64_t>(round_up(plan.block_n, en), 512);
  uint64_t tk = std::min<uint64_t>(round_up(s.a.cols, ek), 256);
  while (tile_bytes(s, tm, tn, tk).total() > budget) {
    if (tm >= tn && tm > 32) {
      tm = std::max<uint64_t>(32, tm / 2);
    } else if (tn > en) {
      tn = std::max<uint64_t>(en, round_up(tn / 2, en));
    } else if (tk > ek) {
      tk = std::max<uint64_t>(ek, round_up(tk / 2, ek));
    } else if (tm > 1) {
      tm = std::max<uint64_t>(1, tm / 2);
    } else {
      throw KernelBuildError(
          rt::str("matmul: even a 1x", tn, "x", tk, " tile needs ",
                  tile_bytes(s, tm, tn, tk).total(),
                  " bytes of scratchpad, over the ", budget, " available"));
    }
  }
  plan.tile_m = tm;
  plan.tile_n = std::min(tn, plan.block_n);
  plan.tile_k = std::min(tk, s.a.cols);
}

double plan_cost(const MatmulShape& s, uint32_t gm, uint32_t gn) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  Split ms{s.a.rows, gm, 1}, ns{s.b.cols, gn, en};
  if (ms.used_parts() != gm || ns.used_parts() != gn) {
    return std::numeric_limits<double>::infinity();
  }
  const double m = static_cast<double>(s.a.rows);
  const double n = static_cast<double>(s.b.cols);
  const double k = static_cast<double>(s.a.cols);
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
                 block_n, ", tile ", tile_m, "x", tile_n, "x", tile_k);
}

MatmulPlan plan_matmul(const MatmulShape& s, const MatmulOptions& options) {
  check_shapes(s);
  MatmulPlan best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (uint32_t gm = 1; gm <= options.max_cores; ++gm) {
    for (uint32_t gn = 1; gm * gn <= options.max_cores; ++gn) {
      double cost = plan_cost(s, gm, gn);
      if (cost < best_cost) {
        best_cost = cost;
        best.grid_m = gm;
        best.grid_n = gn;
      }
    }
  }
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  best.block_m = Split{s.a.rows, best.grid_m, 1}.chunk();
  best.block_n = Split{s.b.cols, best.grid_n, en}.chunk();
  choose_tiles(s, best, options.scratchpad_bytes - options.scratchpad_reserve);
  return best;
}

namespace {

struct CoreBlock {
  uint64_t m0, m, n0, n;
  uint32_t grid_row, grid_col;
};

struct SharedBuffers {
  uint32_t a[2], b[2], acc, out;
  uint32_t a_pitch, b_pitch, acc_pitch, out_pitch;
};

SharedBuffers reserve_buffers(CoreBuilder& core, const MatmulShape& s,
                              const MatmulPlan& p) {
  SharedBuffers buf{};
  buf.a_pitch = padded_row_bytes(p.tile_k, s.a.dtype);
  buf.b_pitch = padded_row_bytes(p.tile_n, s.b.dtype);
  buf.acc_pitch = padded_row_bytes(p.tile_n, rt::DType::kFloat32);
  buf.out_pitch = padded_row_bytes(p.tile_n, s.c.dtype);
  for (int i = 0; i < 2; ++i) {
    buf.a[i] = core.reserve(p.tile_m * buf.a_pitch, "matmul A tile");
    buf.b[i] = core.reserve(p.tile_k * buf.b_pitch, "matmul B tile");
  }
  buf.acc = core.reserve(p.tile_m * buf.acc_pitch, "matmul accumulator");
  buf.out = core.reserve(p.tile_m * buf.out_pitch, "matmul output tile");
  return buf;
}

// Cores that issue an identical read get the same share-group id: the key
// is the operand, the grid line (at most 8 cores share a read), the sub-block
// and K step, and the scratchpad offset (equal only when the cores are in
// step, which ragged edge blocks may not be).
struct ShareGroups {
  ProgramBuilder& builder;
  std::map<std::array<uint64_t, 6>, uint32_t> ids;
  uint32_t get(const std::array<uint64_t, 6>& key) {
    auto [it, inserted] = ids.try_emplace(key, 0);
    if (inserted) it->second = builder.new_share_group();
    return it->second;
  }
};

void emit_core_block(CoreBuilder& core, const MatmulShape& s,
                     const MatmulPlan& p, const CoreBlock& blk,
                     ShareGroups* groups) {
  const SharedBuffers buf = reserve_buffers(core, s, p);
  const uint64_t k_total = s.a.cols;
  int parity = 0;
  for (uint64_t mi = 0; mi < blk.m; mi += p.tile_m) {
    const uint64_t tm = std::min(p.tile_m, blk.m - mi);
    for (uint64_t ni = 0; ni < blk.n; ni += p.tile_n) {
      const uint64_t tn = std::min(p.tile_n, blk.n - ni);
      for (uint64_t k0 = 0; k0 < k_total; k0 += p.tile_k) {
        const uint64_t tk = std::min(p.tile_k, k_total - k0);
        rt::DmaLoad load_a{
            s.a.tile(0, blk.m0 + mi, tm, k0, tk, buf.a[parity], buf.a_pitch)};
        rt::DmaLoad load_b{
            s.b.tile(1, k0, tk, blk.n0 + ni, tn, buf.b[parity], buf.b_pitch)};
        if (groups != nullptr && p.grid_n > 1) {
          load_a.xfer.share_group =
              groups->get({0, blk.grid_row * 64u + blk.grid_col / 8, mi, ni, k0,
                           buf.a[parity]});
        }
        if (groups != nullptr && p.grid_m > 1) {
          load_b.xfer.share_group =
              groups->get({1, blk.grid_col * 64u + blk.grid_row / 8, mi, ni, k0,
                           buf.b[parity]});
        }
        core.emit(load_a);
        core.emit(load_b);
        rt::MatMul mm;
        mm.a = {buf.a[parity], s.a.dtype, static_cast<int32_t>(buf.a_pitch),
                static_cast<int32_t>(rt::element_size(s.a.dtype))};
        mm.b = {buf.b[parity], s.b.dtype, static_cast<int32_t>(buf.b_pitch),
                static_cast<int32_t>(rt::element_size(s.b.dtype))};
        mm.c = {buf.acc, rt::DType::kFloat32,
                static_cast<int32_t>(buf.acc_pitch), 4};
        mm.m = static_cast<uint32_t>(tm);
        mm.n = static_cast<uint32_t>(tn);
        mm.k = static_cast<uint32_t>(tk);
        mm.accumulate = k0 > 0;
        core.emit(mm);
        parity ^= 1;
      }
      rt::Vector round;
      round.op = rt::VecOp::kCopy;
      round.dst = {buf.out, s.c.dtype, static_cast<int32_t>(buf.out_pitch),
                   static_cast<int32_t>(rt::element_size(s.c.dtype))};
      round.src0 = {buf.acc, rt::DType::kFloat32,
                    static_cast<int32_t>(buf.acc_pitch), 4};
      round.rows = static_cast<uint32_t>(tm);
      round.cols = static_cast<uint32_t>(tn);
      core.emit(round);
      core.emit(rt::DmaStore{s.c.tile(2, blk.m0 + mi, tm, blk.n0 + ni, tn,
                                      buf.out, buf.out_pitch)});
    }
  }
}

}  // namespace

rt::Program build_matmul(const MatmulShape& s, const MatmulPlan& p,
                         const MatmulOptions& options) {
  check_shapes(s);
  if (p.grid_m * p.grid_n > options.max_cores) {
    throw KernelBuildError(rt::str("matmul plan ", p.describe(), " needs ",
                                   p.grid_m * p.grid_n, " cores, only ",
                                   options.max_cores, " available"));
  }
  ProgramBuilder builder(
      rt::str("matmul_", s.a.rows, "x", s.a.cols, "x", s.b.cols),
      options.max_cores, options.scratchpad_bytes - options.scratchpad_reserve);
  builder.add_arg("a", s.a.dtype, s.a.bytes(), false);
  builder.add_arg("b", s.b.dtype, s.b.bytes(), false);
  builder.add_arg("c", s.c.dtype, s.c.bytes(), true);
  ShareGroups groups{builder, {}};
  const Split ms{s.a.rows, p.grid_m, 1};
  const Split ns{s.b.cols, p.grid_n, rt::elements_per_stick(s.c.dtype)};
  for (uint32_t gr = 0; gr < p.grid_m; ++gr) {
    for (uint32_t gc = 0; gc < p.grid_n; ++gc) {
      CoreBlock blk{ms.begin(gr), ms.size(gr), ns.begin(gc),
                    ns.size(gc),  gr,          gc};
      if (blk.m == 0 || blk.n == 0) continue;
      // Cores of a grid row sit next to each other on the ring.
      CoreBuilder& core = builder.core(gr * p.grid_n + gc);
      emit_core_block(core, s, p, blk, options.share_reads ? &groups : nullptr);
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
