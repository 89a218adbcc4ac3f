#include "spyre/kernels/mlp.h"

#include <algorithm>
#include <array>
#include <map>

#include "matmul_parts.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;
constexpr uint64_t kRowQuantum = 16;  // the matrix unit's rows per pass
constexpr uint64_t kStoreRows = 64;   // output rows stored per chunk

enum Slot : uint32_t { kX = 0, kWUp = 1, kWDown = 2, kY = 3 };

uint64_t round_up(uint64_t v, uint64_t q) { return ceil_div(v, q) * q; }

bool row_vector(const std::optional<Matrix>& b, uint64_t cols, rt::DType t) {
  return !b || (b->rows == 1 && b->cols == cols && b->dtype == t &&
                b->batch_count() == 1);
}

void check_shape(const MlpShape& s) {
  const rt::DType t = s.x.dtype;
  const uint64_t up_k = s.w_up_transposed ? s.w_up.cols : s.w_up.rows;
  const uint64_t down_k = s.w_down_transposed ? s.w_down.cols : s.w_down.rows;
  const uint64_t down_n = s.w_down_transposed ? s.w_down.rows : s.w_down.cols;
  if (up_k != s.d() || down_k != s.h() || down_n != s.e() ||
      s.y.rows != s.m()) {
    throw KernelBuildError(rt::str("mlp shapes disagree: x ", s.m(), "x", s.d(),
                                   ", w_up ", up_k, "x", s.h(), ", w_down ",
                                   down_k, "x", down_n, ", y ", s.y.rows, "x",
                                   s.y.cols));
  }
  if (s.w_up.dtype != t || s.w_down.dtype != t || s.y.dtype != t ||
      !rt::is_floating(t)) {
    throw KernelBuildError("mlp: x, weights and y must share a floating dtype");
  }
  if (s.x.batch_count() != 1 || s.y.batch_count() != 1 ||
      s.w_up.batch_count() != 1 || s.w_down.batch_count() != 1) {
    throw KernelBuildError("mlp: flatten batch dimensions of x into rows");
  }
  if (!row_vector(s.b_up, s.h(), t) || !row_vector(s.b_down, s.e(), t)) {
    throw KernelBuildError(
        "mlp biases must be single rows (1 x H and 1 x E) in x's dtype");
  }
  if (s.m() == 0 || s.d() == 0 || s.h() == 0 || s.e() == 0) {
    throw KernelBuildError("mlp of an empty matrix needs no program");
  }
}

struct Layout {
  uint64_t x, h, acc, w, wt, out, b_up, b_down;
  uint64_t total() const {
    return x + h + acc + 2 * (w + wt + out) + b_up + b_down;
  }
};

Layout layout(const MlpShape& s, uint64_t rows, uint64_t tn, uint64_t tk) {
  const rt::DType t = s.x.dtype;
  const bool transposed = s.w_up_transposed || s.w_down_transposed;
  return {rows * padded_row_bytes(s.d(), t),
          rows * padded_row_bytes(s.h(), t),
          rows * padded_row_bytes(tn, kF32),
          tk * padded_row_bytes(tn, t),
          transposed ? tn * padded_row_bytes(tk, t) : 0,
          std::min(rows, kStoreRows) * padded_row_bytes(tn, t),
          s.b_up ? padded_row_bytes(s.h(), t) : 0,
          s.b_down ? padded_row_bytes(s.e(), t) : 0};
}

}  // namespace

std::string MlpPlan::describe() const {
  return rt::str(cores, " cores x ", block_m, " rows, ", pass_m,
                 " rows resident per pass, tile n ", tile_n, " k ", tile_k);
}

MlpPlan plan_mlp(const MlpShape& s, const MlpOptions& o) {
  check_shape(s);
  const uint64_t budget = o.target.scratchpad_budget();
  const uint64_t e = rt::elements_per_stick(s.x.dtype);
  MlpPlan p;
  const Split rows{s.m(), o.target.cores(), kRowQuantum};
  p.cores = rows.used_parts();
  p.block_m = std::min(rows.chunk(), s.m());
  p.tile_n = std::min<uint64_t>(256, round_up(std::max(s.h(), s.e()), e));
  p.tile_k = std::min<uint64_t>(128, round_up(std::max(s.d(), s.h()), e));
  // As many rows resident as fit (fewer passes: weights read fewer times).
  for (uint64_t r = round_up(p.block_m, kRowQuantum); r >= kRowQuantum;
       r -= kRowQuantum) {
    if (layout(s, r, p.tile_n, p.tile_k).total() <= budget) {
      p.pass_m = r;
      break;
    }
  }
  if (p.pass_m == 0) {
    throw KernelBuildError(rt::str(
        "mlp: 16 rows of x (", s.d(), " wide) and of the intermediate (", s.h(),
        " wide) need ", layout(s, kRowQuantum, p.tile_n, p.tile_k).total(),
        " bytes of scratchpad, over the ", budget,
        " available; lower it as two matmuls"));
  }
  p.pass_m = std::min(p.pass_m, p.block_m);
  return p;
}

namespace {

struct Buffers {
  uint32_t x, h, acc, w[2], wt[2], out[2], b_up, b_down;
  uint32_t x_pitch, h_pitch, acc_pitch, w_pitch, wt_pitch, out_pitch;
};

// One matmul instruction's worth of work in either phase.
struct Step {
  int phase;  // 0: h = act(x @ W_up + b_up), 1: y = h @ W_down + b_down
  uint64_t pass, m0, rows, n0, tn, k0, tk;
  bool last_k;
};

class MlpEmitter {
 public:
  // Cores are grouped by `broadcast_cores`, the cores one broadcast read
  // can serve on the target chip.
  MlpEmitter(ProgramBuilder& builder, uint32_t core_id, const MlpShape& s,
             const MlpPlan& p, std::map<std::array<uint64_t, 6>, uint32_t>& ids,
             uint32_t broadcast_cores)
      : builder_(builder),
        core_(builder.core(core_id)),
        s_(s),
        p_(p),
        ids_(ids),
        group_(core_id / broadcast_cores) {
    reserve();
  }

  void emit(uint64_t m0, uint64_t m) {
    std::vector<Step> steps;
    for (uint64_t pass = 0, r0 = 0; r0 < m; r0 += p_.pass_m, ++pass) {
      const uint64_t rows = std::min(p_.pass_m, m - r0);
      add_phase(steps, 0, pass, m0 + r0, rows, s_.h(), s_.d());
      add_phase(steps, 1, pass, m0 + r0, rows, s_.e(), s_.h());
    }
    load_biases();
    emit_step_loads(steps[0], 0);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i + 1 < steps.size()) emit_step_loads(steps[i + 1], (i + 1) % 2);
      emit_matmul(steps[i], i % 2);
      if (steps[i].last_k) emit_epilogue(steps[i]);
    }
  }

 private:
  void reserve() {
    const rt::DType t = s_.x.dtype;
    const Layout l = layout(s_, p_.pass_m, p_.tile_n, p_.tile_k);
    auto take = [&](uint64_t n, const char* what) {
      return n == 0 ? 0u : core_.reserve(static_cast<uint32_t>(n), what);
    };
    buf_.x = take(l.x, "mlp x rows");
    buf_.h = take(l.h, "mlp intermediate");
    buf_.acc = take(l.acc, "mlp accumulator");
    for (int i = 0; i < 2; ++i) {
      buf_.w[i] = take(l.w, "mlp weight tile");
      buf_.wt[i] = take(l.wt, "mlp transposed weight tile");
      buf_.out[i] = take(l.out, "mlp output chunk");
    }
    buf_.b_up = take(l.b_up, "mlp b_up");
    buf_.b_down = take(l.b_down, "mlp b_down");
    buf_.x_pitch = padded_row_bytes(s_.d(), t);
    buf_.h_pitch = padded_row_bytes(s_.h(), t);
    buf_.acc_pitch = padded_row_bytes(p_.tile_n, kF32);
    buf_.w_pitch = padded_row_bytes(p_.tile_n, t);
    buf_.wt_pitch = padded_row_bytes(p_.tile_k, t);
    buf_.out_pitch = padded_row_bytes(p_.tile_n, t);
  }

  void add_phase(std::vector<Step>& steps, int phase, uint64_t pass,
                 uint64_t m0, uint64_t rows, uint64_t n, uint64_t k) {
    for (uint64_t n0 = 0; n0 < n; n0 += p_.tile_n) {
      for (uint64_t k0 = 0; k0 < k; k0 += p_.tile_k) {
        const uint64_t tk = std::min(p_.tile_k, k - k0);
        steps.push_back({phase, pass, m0, rows, n0, std::min(p_.tile_n, n - n0),
                         k0, tk, k0 + tk == k});
      }
    }
  }

  uint32_t bias_slot(int phase) const {
    return phase == 0 ? 4 : (s_.b_up ? 5 : 4);
  }

  void load_biases() {
    if (s_.b_up) {
      core_.load(s_.b_up->tiles(bias_slot(0), 0, 1, 0, s_.h(), buf_.b_up,
                                buf_.h_pitch));
    }
    if (s_.b_down) {
      core_.load(s_.b_down->tiles(bias_slot(1), 0, 1, 0, s_.e(), buf_.b_down,
                                  padded_row_bytes(s_.e(), s_.x.dtype)));
    }
  }

  uint32_t share_group(const Step& st, uint32_t spad) {
    auto [it, inserted] = ids_.try_emplace(
        std::array<uint64_t, 6>{group_, static_cast<uint64_t>(st.phase),
                                st.pass, st.n0, st.k0, spad},
        0);
    if (inserted) it->second = builder_.new_share_group();
    return it->second;
  }

  void emit_step_loads(const Step& st, size_t par) {
    if (st.phase == 0 && st.n0 == 0) {
      // The first sweep of a pass brings its rows of x in, one K chunk with
      // each weight tile (compute starts after the first chunk); they stay
      // resident for the rest of the up-projection.
      core_.load(s_.x.tiles(kX, st.m0, st.rows, st.k0, st.tk,
                            column(buf_.x, st.k0), buf_.x_pitch));
    }
    const Matrix& w = st.phase == 0 ? s_.w_up : s_.w_down;
    const bool transposed =
        st.phase == 0 ? s_.w_up_transposed : s_.w_down_transposed;
    const uint32_t slot = st.phase == 0 ? kWUp : kWDown;
    const uint32_t dst = transposed ? buf_.wt[par] : buf_.w[par];
    const auto xfers =
        transposed
            ? w.tiles(slot, st.n0, st.tn, st.k0, st.tk, dst, buf_.wt_pitch)
            : w.tiles(slot, st.k0, st.tk, st.n0, st.tn, dst, buf_.w_pitch);
    // Every core loads the same weight tile at the same point of its
    // stream: broadcast to the cores of its group of 8.
    core_.load(xfers, xfers.size() == 1 ? share_group(st, dst) : 0);
    if (transposed) {
      core_.emit(vec(
          rt::VecOp::kCopy, spad_tile(buf_.w[par], s_.x.dtype, buf_.w_pitch),
          transposed_tile(buf_.wt[par]), static_cast<uint32_t>(st.tk),
          static_cast<uint32_t>(st.tn)));
    }
  }

  rt::Tile transposed_tile(uint32_t at) const {
    return transposed(spad_tile(at, s_.x.dtype, buf_.wt_pitch));
  }

  uint32_t column(uint32_t base, uint64_t col) const {
    return base + static_cast<uint32_t>(col * rt::element_size(s_.x.dtype));
  }

  void emit_matmul(const Step& st, size_t par) {
    const rt::Tile a =
        st.phase == 0
            ? spad_tile(column(buf_.x, st.k0), s_.x.dtype, buf_.x_pitch)
            : spad_tile(column(buf_.h, st.k0), s_.x.dtype, buf_.h_pitch);
    detail::emit_matmul_tile(core_, a,
                             spad_tile(buf_.w[par], s_.x.dtype, buf_.w_pitch),
                             spad_tile(buf_.acc, kF32, buf_.acc_pitch), st.rows,
                             st.tn, st.tk, st.k0);
  }

  void emit_epilogue(const Step& st) {
    const rt::DType t = s_.x.dtype;
    const int32_t es = static_cast<int32_t>(rt::element_size(t));
    const rt::Tile acc = spad_tile(buf_.acc, kF32, buf_.acc_pitch);
    if (st.phase == 0) {
      // h[:, n0:n0+tn] = act(acc + b_up), rounded to x's dtype, on chip.
      const rt::Tile bias{column(buf_.b_up, st.n0), t, 0, es};
      detail::emit_epilogue_math(
          core_, {1, 1, s_.activation}, acc,
          spad_tile(column(buf_.h, st.n0), t, buf_.h_pitch),
          s_.b_up ? &bias : nullptr, static_cast<uint32_t>(st.rows),
          static_cast<uint32_t>(st.tn));
      return;
    }
    const rt::Tile bias{column(buf_.b_down, st.n0), t, 0, es};
    for (uint64_t r0 = 0; r0 < st.rows; r0 += kStoreRows) {
      const uint64_t rows = std::min(kStoreRows, st.rows - r0);
      const uint32_t out_at = buf_.out[chunk_++ % 2];
      detail::emit_epilogue_math(
          core_, {1, 1, Activation::kNone},
          spad_tile(buf_.acc + static_cast<uint32_t>(r0) * buf_.acc_pitch, kF32,
                    buf_.acc_pitch),
          spad_tile(out_at, t, buf_.out_pitch), s_.b_down ? &bias : nullptr,
          static_cast<uint32_t>(rows), static_cast<uint32_t>(st.tn));
      core_.store(s_.y.tiles(kY, st.m0 + r0, rows, st.n0, st.tn, out_at,
                             buf_.out_pitch));
    }
  }

  ProgramBuilder& builder_;
  CoreBuilder& core_;
  const MlpShape& s_;
  const MlpPlan& p_;
  std::map<std::array<uint64_t, 6>, uint32_t>& ids_;
  uint64_t group_;
  Buffers buf_{};
  uint64_t chunk_ = 0;
};

}  // namespace

rt::Program build_mlp(const MlpShape& s, const MlpPlan& p,
                      const MlpOptions& o) {
  check_shape(s);
  if (p.cores == 0 || p.cores > o.target.cores() || p.pass_m == 0 ||
      p.tile_n == 0 || p.tile_k == 0) {
    throw KernelBuildError("mlp plan is empty or too wide: use plan_mlp");
  }
  ProgramBuilder builder(rt::str("mlp_", s.m(), "x", s.d(), "x", s.h(), "x",
                                 s.e(), "_", activation_name(s.activation)),
                         o.target.cores(), o.target.scratchpad_budget());
  builder.add_arg("x", s.x.dtype, s.x.bytes(), false);
  builder.add_arg("w_up", s.x.dtype, s.w_up.bytes(), false);
  builder.add_arg("w_down", s.x.dtype, s.w_down.bytes(), false);
  builder.add_arg("y", s.x.dtype, s.y.bytes(), true);
  if (s.b_up) builder.add_arg("b_up", s.x.dtype, s.b_up->bytes(), false);
  if (s.b_down) builder.add_arg("b_down", s.x.dtype, s.b_down->bytes(), false);
  const Split rows{s.m(), p.cores, p.block_m};
  std::map<std::array<uint64_t, 6>, uint32_t> share_ids;
  for (uint32_t c = 0; c < p.cores; ++c) {
    if (rows.size(c) == 0) continue;
    MlpEmitter(builder, c, s, p, share_ids,
               o.target.costs().max_broadcast_cores)
        .emit(rows.begin(c), rows.size(c));
  }
  return std::move(builder).finish();
}

UnfusedMlp unfused_mlp(const MlpShape& s) {
  check_shape(s);
  const rt::DType t = s.x.dtype;
  UnfusedMlp u;
  u.h = Matrix::stick_columns(s.m(), s.h(), t);
  // A 1 x N bias row as an M x N bias with stride-0 rows.
  auto broadcast =
      [&](const std::optional<Matrix>& b) -> std::optional<Matrix> {
    if (!b) return std::nullopt;
    const Matrix row = b->strided_form();
    return Matrix::strided(t, row.offset, {{s.m(), 0}}, row.cols,
                           row.stick_stride);
  };
  u.up = MatmulShape{s.x, s.w_up, u.h};
  u.up.b_transposed = s.w_up_transposed;
  u.up.bias = broadcast(s.b_up);
  u.up.activation = s.activation;
  u.down = MatmulShape{u.h, s.w_down, s.y};
  u.down.b_transposed = s.w_down_transposed;
  u.down.bias = broadcast(s.b_down);
  return u;
}

}  // namespace spyre::kernels
