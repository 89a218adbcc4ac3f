#include "spyre/kernels/matmul.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "matmul_parts.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace detail {

double DeviceFigures::macs_per_cycle(rt::DType dtype) const {
  switch (dtype) {
    case rt::DType::kInt8:
      return c_.matmul_macs_int8;
    case rt::DType::kFloat32:
      return c_.matmul_macs_fp32;
    default:
      return c_.matmul_macs_fp16;
  }
}

double DeviceFigures::matmul_cycles(uint64_t m, uint64_t n, uint64_t k,
                                    rt::DType dtype, bool transposed_b) const {
  const uint64_t tile_n = rt::elements_per_stick(dtype);
  const double tiles =
      static_cast<double>(ceil_div(m, c_.matmul_tile_m) * ceil_div(n, tile_n) *
                          ceil_div(k, c_.matmul_tile_k));
  double cycles = tiles * c_.matmul_tile_m * static_cast<double>(tile_n) *
                  c_.matmul_tile_k / macs_per_cycle(dtype);
  if (transposed_b) cycles *= c_.matmul_transposed_b_factor;
  return c_.matmul_fixed_cycles + std::ceil(cycles);
}

double DeviceFigures::vector_cycles(uint64_t rows, uint64_t cols,
                                    uint32_t width, double factor) const {
  const double per_row =
      std::ceil(static_cast<double>(cols * width) / c_.vector_bytes_per_cycle);
  return c_.vector_fixed_cycles + static_cast<double>(rows) * per_row * factor;
}

rt::VecOp activation_op(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return rt::VecOp::kRelu;
    case Activation::kGelu:
      return rt::VecOp::kGelu;
    case Activation::kGeluTanh:
      return rt::VecOp::kGeluTanh;
    case Activation::kSilu:
      return rt::VecOp::kSilu;
    case Activation::kNone:
      break;
  }
  return rt::VecOp::kCopy;
}

void emit_epilogue_math(CoreBuilder& core, const EpilogueMath& math,
                        rt::Tile acc, rt::Tile out, const rt::Tile* bias,
                        uint32_t rows, uint32_t cols) {
  // `scale` is what acc still has to be multiplied by.
  double scale = math.alpha;
  if (bias != nullptr) {
    // acc = (alpha / beta * acc + bias) * beta: fp32 throughout, so beta
    // never rounds the bias to c's dtype.
    if (scale / math.beta != 1) {
      core.emit(
          vec_imm(rt::VecOp::kMul, acc, acc, scale / math.beta, rows, cols));
    }
    core.emit(vec2(rt::VecOp::kAdd, acc, acc, *bias, rows, cols));
    scale = math.beta;
  }
  if (math.activation == Activation::kNone) {
    core.emit(scale == 1
                  ? vec(rt::VecOp::kCopy, out, acc, rows, cols)
                  : vec_imm(rt::VecOp::kMul, out, acc, scale, rows, cols));
    return;
  }
  if (scale != 1) {
    core.emit(vec_imm(rt::VecOp::kMul, acc, acc, scale, rows, cols));
  }
  core.emit(vec(activation_op(math.activation), out, acc, rows, cols));
}

double epilogue_cycles(const DeviceFigures& f, const EpilogueMath& math,
                       bool has_bias, uint64_t rows, uint64_t cols) {
  const double simple = f.vector_cycles(rows, cols, 4);
  double total = 0;
  if (has_bias) total += 2 * simple;
  if (math.activation == Activation::kNone) return total + simple;
  const bool relu = math.activation == Activation::kRelu;
  return total + simple +
         f.vector_cycles(rows, cols, 4,
                         relu ? 1 : f.costs().vector_transcendental_factor);
}

}  // namespace detail

namespace {

using detail::DeviceFigures;
constexpr rt::DType kF32 = rt::DType::kFloat32;

uint64_t round_up(uint64_t v, uint64_t q) { return ceil_div(v, q) * q; }

// Rows of M handed to one core start a stick when A is stored transposed
// (M then runs along A's sticks).
uint64_t m_quantum(const MatmulShape& s) {
  return s.a_transposed ? rt::elements_per_stick(s.a.dtype) : 1;
}

bool has_bias(const MatmulShape& s) { return s.bias && s.beta != 0; }

bool bias_is_row_broadcast(const MatmulShape& s) {
  if (!has_bias(s)) return false;
  const Matrix m = s.bias->strided_form();
  return std::all_of(m.row_dims.begin(), m.row_dims.end(),
                     [](const StridedDim& d) { return d.stride == 0; });
}

detail::EpilogueMath epilogue_math(const MatmulShape& s) {
  return {s.alpha, s.beta, s.activation};
}

// Scratchpad bytes of one of each buffer of a plan.
struct TileBytes {
  uint64_t a, b, bt, acc, out_chunk, bias_row;
  uint64_t total() const {
    return 2 * (a + b + bt + out_chunk) + acc + bias_row;
  }
};

uint64_t store_rows_of(const MatmulPlan& p) {
  return p.store_rows == 0 ? p.tile_m : std::min(p.store_rows, p.tile_m);
}

TileBytes tile_bytes(const MatmulShape& s, uint64_t tm, uint64_t tn,
                     uint64_t tk, uint64_t store_rows, bool transpose_b) {
  const bool b_raw_transposed = s.b_transposed && !transpose_b;
  return {s.a_transposed ? tk * padded_row_bytes(tm, s.a.dtype)
                         : tm * padded_row_bytes(tk, s.a.dtype),
          b_raw_transposed ? tn * padded_row_bytes(tk, s.b.dtype)
                           : tk * padded_row_bytes(tn, s.b.dtype),
          transpose_b ? tn * padded_row_bytes(tk, s.b.dtype) : 0,
          tm * padded_row_bytes(tn, kF32),
          std::min(store_rows, tm) * padded_row_bytes(tn, s.c.dtype),
          bias_is_row_broadcast(s) ? padded_row_bytes(tn, s.c.dtype) : 0};
}

TileBytes tile_bytes(const MatmulShape& s, const MatmulPlan& p) {
  return tile_bytes(s, p.tile_m, p.tile_n, p.tile_k, store_rows_of(p),
                    p.transpose_b_on_chip);
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
  if (s.activation != Activation::kNone && !rt::is_floating(s.c.dtype)) {
    throw KernelBuildError(rt::str("matmul activation ",
                                   activation_name(s.activation),
                                   " needs a floating output dtype"));
  }
}

// Sum over the tiles of a length-`n` range cut into `tile`-long pieces of
// ceil(piece / quantum): the quantised work along one dimension.
double quantised(uint64_t n, uint64_t tile, uint64_t quantum) {
  const uint64_t full = n / tile, rest = n % tile;
  return static_cast<double>(full * ceil_div(tile, quantum) +
                             ceil_div(rest, quantum));
}

// Contiguous runs a tile load of `rows` rows of matrix `m` takes.
uint64_t load_runs(const Matrix& m, uint64_t rows, uint64_t cols) {
  const Matrix f = m.strided_form();
  const uint64_t sticks = ceil_div(cols, m.elements_per_stick());
  return f.stick_stride == rt::kStickBytes ? rows : rows * sticks;
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSilu:
      return "silu";
  }
  return "?";
}

double estimate_matmul_cycles(const MatmulShape& s, const MatmulPlan& p,
                              const rt::CostTable& costs) {
  const DeviceFigures f(costs);
  const rt::CostTable& c = costs;
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  const Split ms{s.m(), p.grid_m, m_quantum(s)}, ns{s.n(), p.grid_n, en};
  const uint64_t bm = std::min(ms.chunk(), s.m());
  const uint64_t bn = std::min(ns.chunk(), s.n());
  const uint64_t k = s.k();
  const uint64_t groups = std::max<uint32_t>(p.groups, 1);
  const double per_group =
      static_cast<double>(ceil_div(s.batch_count(), groups));
  const double nm = static_cast<double>(ceil_div(bm, p.tile_m));
  const double nn = static_cast<double>(ceil_div(bn, p.tile_n));
  const double nk = static_cast<double>(ceil_div(k, p.tile_k));
  const uint64_t b_quantum = rt::elements_per_stick(s.b.dtype);

  // Matrix unit: tile-quantised MACs plus the fixed cost per instruction.
  const bool slow_b = s.b_transposed && !p.transpose_b_on_chip;
  const double unit = c.matmul_tile_m * static_cast<double>(b_quantum) *
                      c.matmul_tile_k / f.macs_per_cycle(s.a.dtype) *
                      (slow_b ? c.matmul_transposed_b_factor : 1);
  const double matrix =
      per_group * (unit * quantised(bm, p.tile_m, c.matmul_tile_m) *
                       quantised(bn, p.tile_n, b_quantum) *
                       quantised(k, p.tile_k, c.matmul_tile_k) +
                   c.matmul_fixed_cycles * nm * nn * nk);

  // The core's DMA engine: every K step loads an A and a B tile; every
  // output chunk is stored (full-size tiles: an upper bound).
  const TileBytes tb = tile_bytes(s, p);
  const uint64_t a_rows = s.a_transposed ? p.tile_k : p.tile_m;
  const uint64_t a_cols = s.a_transposed ? p.tile_m : p.tile_k;
  const uint64_t b_rows = s.b_transposed ? p.tile_n : p.tile_k;
  const uint64_t b_cols = s.b_transposed ? p.tile_k : p.tile_n;
  const double step_dma =
      f.dma_cycles(tb.a, load_runs(s.a, a_rows, a_cols)) +
      f.dma_cycles(std::max(tb.b, tb.bt), load_runs(s.b, b_rows, b_cols));
  const uint64_t store_rows = store_rows_of(p);
  const double chunks =
      nm * static_cast<double>(ceil_div(p.tile_m, store_rows));
  const double out_bytes =
      static_cast<double>(bm) * padded_row_bytes(bn, s.c.dtype);
  const double bias_loads = has_bias(s) && !bias_is_row_broadcast(s) ? 2 : 1;
  const double dma =
      per_group * (nm * nn * nk * step_dma +
                   bias_loads * (out_bytes / c.dma_bytes_per_cycle +
                                 nn * chunks * c.dma_latency_cycles));

  // Vector unit: epilogues, and B^T tiles transposed on chip.
  double vector = per_group * nn * chunks *
                  detail::epilogue_cycles(f, epilogue_math(s), has_bias(s),
                                          store_rows, p.tile_n);
  if (p.transpose_b_on_chip) {
    vector += per_group * nm * nn * nk *
              f.vector_cycles(p.tile_k, p.tile_n, rt::element_size(s.b.dtype),
                              c.vector_strided_factor);
  }

  // Device memory, shared by all cores: A is read once per N tile of a
  // block by each grid column (a broadcast reaches 8 cores), B once per M
  // tile by each grid row; C written once.
  const double batches = static_cast<double>(s.batch_count());
  const double share_a =
      p.share_reads
          ? static_cast<double>(ceil_div(p.grid_n, c.max_broadcast_cores))
          : p.grid_n;
  const double share_b =
      p.share_reads
          ? static_cast<double>(ceil_div(p.grid_m, c.max_broadcast_cores))
          : p.grid_m;
  const double a_bytes = static_cast<double>(s.m()) *
                         padded_row_bytes(k, s.a.dtype) * nn * share_a;
  const double b_bytes = static_cast<double>(s.n()) *
                         padded_row_bytes(k, s.b.dtype) * nm * share_b;
  const double c_bytes = static_cast<double>(s.m()) *
                         padded_row_bytes(s.n(), s.c.dtype) * bias_loads;
  const double dram =
      c.dram_cycles(batches * (a_bytes + b_bytes), batches * c_bytes);

  // The busiest resource sets the pace; the others overlap imperfectly.
  const double slowest = std::max({matrix, dma, vector, dram});
  const double others = matrix + dma + vector + dram - slowest;
  const double prologue = f.dma_cycles(tb.a + tb.b + tb.bt, a_rows + b_rows);
  const double tail = f.dma_cycles(tb.out_chunk, store_rows);
  return slowest + 0.1 * others + prologue + tail;
}

std::string MatmulPlan::describe() const {
  return rt::str("grid ", grid_m, "x", grid_n, ", block ", block_m, "x",
                 block_n, ", tile ", tile_m, "x", tile_n, "x", tile_k,
                 groups > 1 ? rt::str(", ", groups, " batch groups") : "",
                 store_rows != 0 && store_rows < tile_m
                     ? rt::str(", store ", store_rows, " rows")
                     : "",
                 share_reads ? "" : ", private reads",
                 transpose_b_on_chip ? ", B^T transposed on chip" : "");
}

namespace {

uint32_t cores_per_product(const MatmulShape& s, const MatmulOptions& o) {
  const uint64_t batches = s.batch_count();
  return batches >= o.target.cores()
             ? 1
             : static_cast<uint32_t>(o.target.cores() / batches);
}

void set_grid(const MatmulShape& s, const MatmulOptions& o, MatmulPlan& p) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  p.block_m = Split{s.m(), p.grid_m, m_quantum(s)}.chunk();
  p.block_n = Split{s.n(), p.grid_n, en}.chunk();
  p.groups = static_cast<uint32_t>(std::min<uint64_t>(
      s.batch_count(), o.target.cores() / (p.grid_m * p.grid_n)));
}

// Candidate tile sizes along one dimension: `steps` that are multiples of
// `quantum` and not larger than the (rounded) extent, plus the rounded
// extent itself when it is small enough to be one tile.
std::vector<uint64_t> tile_candidates(uint64_t extent, uint64_t quantum,
                                      std::initializer_list<uint64_t> steps,
                                      uint64_t largest) {
  const uint64_t whole = round_up(extent, quantum);
  std::set<uint64_t> out;
  for (uint64_t t : steps) {
    const uint64_t q = round_up(t, quantum);
    if (q <= whole) out.insert(q);
  }
  if (whole <= largest) out.insert(whole);
  if (out.empty()) out.insert(std::min(whole, round_up(largest, quantum)));
  return {out.begin(), out.end()};
}

// Matrix-unit cycles of a bm x bn block with ideal tiles: a lower bound of
// any plan with this grid.
double matrix_lower_bound(const MatmulShape& s, const MatmulPlan& p,
                          uint64_t bm, uint64_t bn, const rt::CostTable& c) {
  const DeviceFigures f(c);
  const uint64_t b_quantum = rt::elements_per_stick(s.b.dtype);
  const double per_group = static_cast<double>(
      ceil_div(s.batch_count(), std::max<uint32_t>(p.groups, 1)));
  return per_group * c.matmul_tile_m * static_cast<double>(b_quantum) *
         c.matmul_tile_k / f.macs_per_cycle(s.a.dtype) *
         static_cast<double>(ceil_div(bm, c.matmul_tile_m) *
                             ceil_div(bn, b_quantum) *
                             ceil_div(s.k(), c.matmul_tile_k));
}

MatmulPlan plan_naive(const MatmulShape& s, const MatmulOptions& o) {
  MatmulPlan p;
  const uint64_t qm = m_quantum(s);
  p.grid_m = Split{s.m(), cores_per_product(s, o), qm}.used_parts();
  p.grid_n = 1;
  set_grid(s, o, p);
  constexpr uint64_t kFixedTile = 64;
  p.tile_m = std::min(round_up(kFixedTile, qm), p.block_m);
  p.tile_n = std::min(round_up(kFixedTile, rt::elements_per_stick(s.c.dtype)),
                      p.block_n);
  p.tile_k =
      std::min(round_up(kFixedTile, rt::elements_per_stick(s.a.dtype)), s.k());
  p.store_rows = 0;
  p.share_reads = false;
  p.transpose_b_on_chip = false;
  if (tile_bytes(s, p).total() > o.target.scratchpad_budget()) {
    throw KernelBuildError(rt::str("matmul (naive lowering): the fixed ",
                                   p.tile_m, "x", p.tile_n, "x", p.tile_k,
                                   " tile does not fit the scratchpad"));
  }
  p.estimated_cycles = estimate_matmul_cycles(s, p, o.target.costs());
  return p;
}

MatmulPlan plan_searched(const MatmulShape& s, const MatmulOptions& o) {
  const uint64_t en = rt::elements_per_stick(s.c.dtype);
  const uint64_t ek = rt::elements_per_stick(s.a.dtype);
  const uint64_t qm = std::max<uint64_t>(m_quantum(s), 1);
  const uint32_t cores = cores_per_product(s, o);
  const uint64_t budget = o.target.scratchpad_budget();
  MatmulPlan best;
  best.estimated_cycles = std::numeric_limits<double>::infinity();
  for (uint32_t gm = 1; gm <= cores; ++gm) {
    for (uint32_t gn = 1; gm * gn <= cores; ++gn) {
      MatmulPlan p;
      p.grid_m = gm;
      p.grid_n = gn;
      if (Split{s.m(), gm, qm}.used_parts() != gm ||
          Split{s.n(), gn, en}.used_parts() != gn) {
        continue;
      }
      set_grid(s, o, p);
      p.share_reads = o.share_reads;
      p.transpose_b_on_chip = s.b_transposed;
      const uint64_t bm = std::min(p.block_m, s.m());
      const uint64_t bn = std::min(p.block_n, s.n());
      // No tiling of this grid beats the matrix unit on its largest block.
      if (matrix_lower_bound(s, p, bm, bn, o.target.costs()) >=
          best.estimated_cycles)
        continue;
      for (uint64_t tm : tile_candidates(
               bm, qm, {16, 32, 64, 128, 192, 256, 384, 512}, 512)) {
        for (uint64_t tn :
             tile_candidates(bn, en, {64, 128, 192, 256, 384, 512}, 512)) {
          for (uint64_t tk :
               tile_candidates(s.k(), ek, {64, 128, 256, 512}, 512)) {
            p.tile_m = std::min(tm, p.block_m);
            p.tile_n = std::min(tn, p.block_n);
            p.tile_k = std::min(tk, s.k());
            p.store_rows = std::min<uint64_t>(p.tile_m, 64);
            if (tile_bytes(s, p).total() > budget) continue;
            p.estimated_cycles = estimate_matmul_cycles(s, p, o.target.costs());
            if (p.estimated_cycles < best.estimated_cycles) best = p;
          }
        }
      }
    }
  }
  if (!std::isfinite(best.estimated_cycles)) {
    throw KernelBuildError(rt::str(
        "matmul ", s.m(), "x", s.k(), "x", s.n(),
        ": no tile fits the scratchpad budget of ", budget,
        " bytes (even a 16-row tile with one-stick N and K is too large)"));
  }
  return best;
}

}  // namespace

MatmulPlan plan_matmul(const MatmulShape& s, const MatmulOptions& options) {
  check_shapes(s);
  return options.lowering == MatmulLowering::kNaive ? plan_naive(s, options)
                                                    : plan_searched(s, options);
}

namespace {

struct CoreBlock {
  uint64_t batch;
  uint64_t m0, m, n0, n;
  uint32_t grid_row, grid_col;
};

// One K step of one output tile of a core block.
struct Step {
  const CoreBlock* blk;
  uint64_t mi, ni, k0, tm, tn, tk;
  bool last_k;
};

struct Buffers {
  uint32_t a[2], b[2], bt[2], acc, out[2], bias_row;
  uint32_t a_pitch, b_pitch, bt_pitch, acc_pitch, out_pitch;
};

Buffers reserve_buffers(CoreBuilder& core, const MatmulShape& s,
                        const MatmulPlan& p) {
  Buffers buf{};
  const TileBytes bytes = tile_bytes(s, p);
  const bool b_raw_transposed = s.b_transposed && !p.transpose_b_on_chip;
  buf.a_pitch = s.a_transposed ? padded_row_bytes(p.tile_m, s.a.dtype)
                               : padded_row_bytes(p.tile_k, s.a.dtype);
  buf.b_pitch = b_raw_transposed ? padded_row_bytes(p.tile_k, s.b.dtype)
                                 : padded_row_bytes(p.tile_n, s.b.dtype);
  buf.bt_pitch = padded_row_bytes(p.tile_k, s.b.dtype);
  buf.acc_pitch = padded_row_bytes(p.tile_n, kF32);
  buf.out_pitch = padded_row_bytes(p.tile_n, s.c.dtype);
  auto reserve = [&](uint64_t n, const char* what) {
    return core.reserve(static_cast<uint32_t>(n), what);
  };
  for (int i = 0; i < 2; ++i) {
    buf.a[i] = reserve(bytes.a, "matmul A tile");
    buf.b[i] = reserve(bytes.b, "matmul B tile");
    if (bytes.bt > 0) buf.bt[i] = reserve(bytes.bt, "matmul B^T tile");
    buf.out[i] = reserve(bytes.out_chunk, "matmul output chunk");
  }
  buf.acc = reserve(bytes.acc, "matmul accumulator");
  if (bytes.bias_row > 0) buf.bias_row = reserve(bytes.bias_row, "bias row");
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

class CoreEmitter {
 public:
  CoreEmitter(CoreBuilder& core, const MatmulShape& s, const MatmulPlan& p,
              ShareGroups* groups)
      : core_(core),
        s_(s),
        p_(p),
        groups_(groups),
        buf_(reserve_buffers(core, s, p)) {}

  // Emits every step; loads for step i + 1 are issued before the matmul of
  // step i, so they (and a tile's stores) overlap the matrix unit.
  void emit(const std::vector<Step>& steps) {
    if (steps.empty()) return;
    emit_loads(steps[0], 0);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i + 1 < steps.size()) emit_loads(steps[i + 1], (i + 1) % 2);
      emit_matmul(steps[i], i % 2);
      if (steps[i].last_k) emit_epilogue(steps[i]);
    }
  }

 private:
  void emit_loads(const Step& st, size_t par) {
    const CoreBlock& blk = *st.blk;
    const uint64_t m_at = blk.m0 + st.mi, n_at = blk.n0 + st.ni;
    load_shared(core_,
                s_.a_transposed
                    ? s_.a.tiles(0, st.k0, st.tk, m_at, st.tm, buf_.a[par],
                                 buf_.a_pitch, blk.batch)
                    : s_.a.tiles(0, m_at, st.tm, st.k0, st.tk, buf_.a[par],
                                 buf_.a_pitch, blk.batch),
                groups_, p_.grid_n > 1 && p_.share_reads,
                {0, blk.batch, blk.grid_row * 64u + blk.grid_col / 8, st.mi,
                 st.ni, st.k0, buf_.a[par]});
    const uint32_t b_dst = p_.transpose_b_on_chip ? buf_.bt[par] : buf_.b[par];
    const uint32_t b_pitch =
        p_.transpose_b_on_chip ? buf_.bt_pitch : buf_.b_pitch;
    load_shared(core_,
                s_.b_transposed ? s_.b.tiles(1, n_at, st.tn, st.k0, st.tk,
                                             b_dst, b_pitch, blk.batch)
                                : s_.b.tiles(1, st.k0, st.tk, n_at, st.tn,
                                             b_dst, b_pitch, blk.batch),
                groups_, p_.grid_m > 1 && p_.share_reads,
                {1, blk.batch, blk.grid_col * 64u + blk.grid_row / 8, st.mi,
                 st.ni, st.k0, b_dst});
    if (p_.transpose_b_on_chip) {
      // B^T (tn x tk) -> B (tk x tn), row-contiguous for the matrix unit.
      core_.emit(vec(
          rt::VecOp::kCopy, spad_tile(buf_.b[par], s_.b.dtype, buf_.b_pitch),
          transposed(spad_tile(buf_.bt[par], s_.b.dtype, buf_.bt_pitch)),
          static_cast<uint32_t>(st.tk), static_cast<uint32_t>(st.tn)));
    }
  }

  void emit_matmul(const Step& st, size_t par) {
    rt::Tile a = spad_tile(buf_.a[par], s_.a.dtype, buf_.a_pitch);
    if (s_.a_transposed) a = transposed(a);
    rt::Tile b = spad_tile(buf_.b[par], s_.b.dtype, buf_.b_pitch);
    if (s_.b_transposed && !p_.transpose_b_on_chip) b = transposed(b);
    detail::emit_matmul_tile(core_, a, b,
                             spad_tile(buf_.acc, kF32, buf_.acc_pitch), st.tm,
                             st.tn, st.tk, st.k0);
  }

  // The finished tile, in chunks of store_rows: bias, scale, activation in
  // fp32, one rounding into an output chunk, then its store.
  void emit_epilogue(const Step& st) {
    const CoreBlock& blk = *st.blk;
    const uint64_t m_at = blk.m0 + st.mi, n_at = blk.n0 + st.ni;
    const bool row_bias = bias_is_row_broadcast(s_);
    if (row_bias) {
      core_.load(s_.bias->tiles(3, 0, 1, n_at, st.tn, buf_.bias_row,
                                buf_.out_pitch, blk.batch));
    }
    const uint64_t rows_per_chunk = store_rows_of(p_);
    for (uint64_t r0 = 0; r0 < st.tm; r0 += rows_per_chunk) {
      const uint64_t rows = std::min(rows_per_chunk, st.tm - r0);
      const uint32_t out_at = buf_.out[chunk_++ % 2];
      const rt::Tile out = spad_tile(out_at, s_.c.dtype, buf_.out_pitch);
      rt::Tile bias = out;
      if (row_bias) {
        bias = {buf_.bias_row, s_.c.dtype, 0, esize(s_.c.dtype)};
      } else if (has_bias(s_)) {
        core_.load(s_.bias->tiles(3, m_at + r0, rows, n_at, st.tn, out_at,
                                  buf_.out_pitch, blk.batch));
      }
      detail::emit_epilogue_math(
          core_, epilogue_math(s_),
          spad_tile(buf_.acc + static_cast<uint32_t>(r0) * buf_.acc_pitch, kF32,
                    buf_.acc_pitch),
          out, has_bias(s_) ? &bias : nullptr, static_cast<uint32_t>(rows),
          static_cast<uint32_t>(st.tn));
      core_.store(s_.c.tiles(2, m_at + r0, rows, n_at, st.tn, out_at,
                             buf_.out_pitch, blk.batch));
    }
  }

  CoreBuilder& core_;
  const MatmulShape& s_;
  const MatmulPlan& p_;
  ShareGroups* groups_;
  Buffers buf_;
  uint64_t chunk_ = 0;
};

void add_steps(const CoreBlock& blk, const MatmulPlan& p, uint64_t k_total,
               std::vector<Step>& steps) {
  for (uint64_t mi = 0; mi < blk.m; mi += p.tile_m) {
    const uint64_t tm = std::min(p.tile_m, blk.m - mi);
    for (uint64_t ni = 0; ni < blk.n; ni += p.tile_n) {
      const uint64_t tn = std::min(p.tile_n, blk.n - ni);
      for (uint64_t k0 = 0; k0 < k_total; k0 += p.tile_k) {
        const uint64_t tk = std::min(p.tile_k, k_total - k0);
        steps.push_back({&blk, mi, ni, k0, tm, tn, tk, k0 + tk == k_total});
      }
    }
  }
}

}  // namespace

rt::Program build_matmul(const MatmulShape& s, const MatmulPlan& p,
                         const MatmulOptions& options) {
  check_shapes(s);
  const uint32_t product_cores = p.grid_m * p.grid_n;
  if (product_cores * std::max<uint32_t>(p.groups, 1) >
      options.target.cores()) {
    throw KernelBuildError(rt::str("matmul plan ", p.describe(), " needs ",
                                   product_cores * p.groups, " cores, only ",
                                   options.target.cores(), " available"));
  }
  if (p.tile_m == 0 || p.tile_n == 0 || p.tile_k == 0) {
    throw KernelBuildError("matmul plan has an empty tile: use plan_matmul");
  }
  if (p.transpose_b_on_chip && !s.b_transposed) {
    throw KernelBuildError(
        "matmul plan transposes B on chip but B is not stored transposed");
  }
  ProgramBuilder builder(rt::str(s.batch_count() > 1 ? "bmm_" : "matmul_",
                                 s.m(), "x", s.k(), "x", s.n()),
                         options.target.cores(),
                         options.target.scratchpad_budget());
  builder.add_arg("a", s.a.dtype, s.a.bytes(), false);
  builder.add_arg("b", s.b.dtype, s.b.bytes(), false);
  builder.add_arg("c", s.c.dtype, s.c.bytes(), true);
  if (s.bias) builder.add_arg("bias", s.c.dtype, s.bias->bytes(), false);
  ShareGroups groups{builder, {}};
  const Split ms{s.m(), p.grid_m, m_quantum(s)};
  const Split ns{s.n(), p.grid_n, rt::elements_per_stick(s.c.dtype)};
  const uint32_t group_count = std::max<uint32_t>(p.groups, 1);
  // Blocks per core first (a core takes several batches in turn), then the
  // steps of all its blocks, emitted as one pipelined stream.
  std::map<uint32_t, std::vector<CoreBlock>> blocks;
  for (uint64_t batch = 0; batch < s.batch_count(); ++batch) {
    const uint32_t first_core =
        static_cast<uint32_t>(batch % group_count) * product_cores;
    for (uint32_t gr = 0; gr < p.grid_m; ++gr) {
      for (uint32_t gc = 0; gc < p.grid_n; ++gc) {
        CoreBlock blk{batch,       ms.begin(gr), ms.size(gr), ns.begin(gc),
                      ns.size(gc), gr,           gc};
        if (blk.m == 0 || blk.n == 0) continue;
        // Cores of a grid row sit next to each other on the ring.
        blocks[first_core + gr * p.grid_n + gc].push_back(blk);
      }
    }
  }
  const bool share = options.share_reads && p.share_reads;
  for (const auto& [id, list] : blocks) {
    std::vector<Step> steps;
    for (const CoreBlock& blk : list) add_steps(blk, p, s.k(), steps);
    CoreEmitter emitter(builder.core(id), s, p, share ? &groups : nullptr);
    emitter.emit(steps);
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
