#include "spyre/kernels/attention.h"

#include <algorithm>
#include <limits>

#include "matmul_parts.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;
constexpr uint32_t kF32Bytes = 4;
// Query rows per block: a multiple of one fp32 stick, so every block's lse
// row starts a stick.
constexpr uint64_t kBlockRows = 64;

enum Slot : uint32_t { kQ = 0, kK = 1, kV = 2, kOut = 3, kLse = 4, kBias = 5 };

bool same_batches(const Matrix& a, const Matrix& b) {
  if (a.batch_dims.size() != b.batch_dims.size()) return false;
  for (size_t i = 0; i < a.batch_dims.size(); ++i) {
    if (a.batch_dims[i].size != b.batch_dims[i].size) return false;
  }
  return true;
}

void check_shape(const AttentionShape& s) {
  const rt::DType t = s.q.dtype;
  if (t != rt::DType::kFloat16 && t != rt::DType::kBFloat16 && t != kF32) {
    throw KernelBuildError("attention: q must be fp16, bf16 or fp32");
  }
  if (s.k.dtype != t || s.v.dtype != t || s.out.dtype != t ||
      (s.bias && s.bias->dtype != t) || s.lse.dtype != kF32) {
    throw KernelBuildError(
        "attention: k, v, out and bias take q's dtype, lse fp32");
  }
  if (s.k.cols != s.d() || s.v.rows != s.s() || s.out.rows != s.l() ||
      s.out.cols != s.dv() || s.lse.rows != 1 || s.lse.cols != s.l() ||
      (s.bias && (s.bias->rows != s.l() || s.bias->cols != s.s()))) {
    throw KernelBuildError(rt::str(
        "attention shapes disagree: q ", s.l(), "x", s.d(), ", k ", s.k.rows,
        "x", s.k.cols, ", v ", s.v.rows, "x", s.v.cols, ", out ", s.out.rows,
        "x", s.out.cols, ", lse ", s.lse.rows, "x", s.lse.cols));
  }
  for (const Matrix* m : {&s.k, &s.v, &s.out, &s.lse}) {
    if (!same_batches(s.q, *m)) {
      throw KernelBuildError("attention: every operand lists q's batches");
    }
  }
  if (s.bias && !same_batches(s.q, *s.bias)) {
    throw KernelBuildError("attention: the bias lists q's batches");
  }
  if (s.l() == 0 || s.s() == 0 || s.d() == 0 || s.dv() == 0) {
    throw KernelBuildError("attention over an empty matrix needs no program");
  }
}

// Scratchpad buffers of one core (offsets) and their row pitches.
struct Buffers {
  uint32_t q, k, kt, v, scores, probs, acc, out, bias, max, sum, tmp, lse;
  uint32_t q_pitch, k_pitch, kt_pitch, v_pitch, scores_pitch, probs_pitch,
      acc_pitch, out_pitch, bias_pitch, lse_pitch;
};

// The bytes of each buffer, in reservation order; `reserve` gets each.
template <typename Reserve>
Buffers lay_out(const AttentionShape& s, uint64_t rows, Reserve&& reserve) {
  const rt::DType t = s.q.dtype;
  Buffers b{};
  b.q_pitch = padded_row_bytes(s.d(), t);
  b.k_pitch = padded_row_bytes(s.d(), t);
  b.kt_pitch = padded_row_bytes(s.s(), t);
  b.v_pitch = padded_row_bytes(s.dv(), t);
  b.scores_pitch = padded_row_bytes(s.s(), kF32);
  b.probs_pitch = padded_row_bytes(s.s(), t);
  b.acc_pitch = padded_row_bytes(s.dv(), kF32);
  b.out_pitch = padded_row_bytes(s.dv(), t);
  b.bias_pitch = padded_row_bytes(s.s(), t);
  b.lse_pitch = padded_row_bytes(rows, kF32);
  b.q = reserve(rows * b.q_pitch, "attention q block");
  b.k = reserve(s.s() * b.k_pitch, "attention keys");
  b.kt = reserve(s.d() * b.kt_pitch, "attention keys transposed");
  b.v = reserve(s.s() * b.v_pitch, "attention values");
  b.scores = reserve(rows * b.scores_pitch, "attention scores");
  b.probs = reserve(rows * b.probs_pitch, "attention probabilities");
  b.acc = reserve(rows * b.acc_pitch, "attention accumulator");
  b.out = reserve(rows * b.out_pitch, "attention output block");
  b.bias = s.bias ? reserve(rows * b.bias_pitch, "attention bias") : 0;
  b.max = reserve(b.lse_pitch, "attention row max");
  b.sum = reserve(b.lse_pitch, "attention row sum");
  b.tmp = reserve(b.lse_pitch, "attention row scratch");
  b.lse = reserve(b.lse_pitch, "attention lse");
  return b;
}

uint64_t footprint(const AttentionShape& s, uint64_t rows) {
  uint64_t total = 0;
  lay_out(s, rows, [&](uint64_t bytes, const char*) {
    total += ceil_div(bytes, rt::kStickBytes) * rt::kStickBytes;
    return 0u;
  });
  return total;
}

// One value per row of a block, rows 4 bytes apart: a column that row-wise
// vector ops broadcast along the row.
rt::Tile row_values(uint32_t at) { return rt::Tile{at, kF32, kF32Bytes, 0}; }

class AttentionEmitter {
 public:
  AttentionEmitter(CoreBuilder& core, const AttentionShape& s, uint64_t rows)
      : core_(core), s_(s), rows_(rows) {
    b_ = lay_out(s, rows, [&](uint64_t bytes, const char* what) {
      return core_.reserve(static_cast<uint32_t>(bytes), what);
    });
  }

  void block(uint64_t batch, uint64_t r0) {
    const uint64_t rows = std::min(rows_, s_.l() - r0);
    if (batch != resident_) load_keys_and_values(batch);
    core_.load(s_.q.tiles(kQ, r0, rows, 0, s_.d(), b_.q, b_.q_pitch, batch));
    if (s_.bias) {
      core_.load(s_.bias->tiles(kBias, r0, rows, 0, s_.s(), b_.bias,
                                b_.bias_pitch, batch));
    }
    scores(rows);
    softmax(rows);
    output(rows);
    core_.store(
        s_.out.tiles(kOut, r0, rows, 0, s_.dv(), b_.out, b_.out_pitch, batch));
    core_.store(
        s_.lse.tiles(kLse, 0, 1, r0, rows, b_.lse, b_.lse_pitch, batch));
  }

 private:
  rt::DType t() const { return s_.q.dtype; }
  uint32_t u32(uint64_t v) const { return static_cast<uint32_t>(v); }

  // The batch's keys, transposed once on the vector unit (the matrix unit
  // reads row-contiguous B fastest), and its values.
  void load_keys_and_values(uint64_t batch) {
    core_.load(s_.k.tiles(kK, 0, s_.s(), 0, s_.d(), b_.k, b_.k_pitch, batch));
    core_.emit(vec(rt::VecOp::kCopy, spad_tile(b_.kt, t(), b_.kt_pitch),
                   transposed(spad_tile(b_.k, t(), b_.k_pitch)), u32(s_.d()),
                   u32(s_.s())));
    core_.load(s_.v.tiles(kV, 0, s_.s(), 0, s_.dv(), b_.v, b_.v_pitch, batch));
    resident_ = batch;
  }

  // scores = scale * q @ k^T + bias, in fp32
  void scores(uint64_t rows) {
    const rt::Tile sc = spad_tile(b_.scores, kF32, b_.scores_pitch);
    detail::emit_matmul_tile(core_, spad_tile(b_.q, t(), b_.q_pitch),
                             spad_tile(b_.kt, t(), b_.kt_pitch), sc, rows,
                             s_.s(), s_.d(), 0);
    if (s_.scale != 1) {
      core_.emit(
          vec_imm(rt::VecOp::kMul, sc, sc, s_.scale, u32(rows), u32(s_.s())));
    }
    if (s_.bias) {
      core_.emit(vec2(rt::VecOp::kAdd, sc, sc,
                      spad_tile(b_.bias, t(), b_.bias_pitch), u32(rows),
                      u32(s_.s())));
    }
  }

  // probs = exp(scores - max) / sum, rounded to q's dtype; lse = max +
  // log(sum). A row of -inf: its max is taken as the lowest finite value,
  // so every exp is 0, the sum 0 (divided as the smallest normal: zeros),
  // and its lse -inf.
  void softmax(uint64_t rows) {
    const uint32_t r = u32(rows), n = u32(s_.s());
    const rt::Tile sc = spad_tile(b_.scores, kF32, b_.scores_pitch);
    rt::Reduce max;
    max.op = rt::RedOp::kMax;
    max.dst = row_values(b_.max);
    max.src = sc;
    max.rows = r;
    max.cols = n;
    core_.emit(max);
    core_.emit(vec_imm(rt::VecOp::kMax, row_values(b_.tmp), row_values(b_.max),
                       -std::numeric_limits<float>::max(), r, 1));
    core_.emit(vec2(rt::VecOp::kSub, sc, sc, row_values(b_.tmp), r, n));
    core_.emit(vec(rt::VecOp::kExp, sc, sc, r, n));
    rt::Reduce sum = max;
    sum.op = rt::RedOp::kSum;
    sum.dst = row_values(b_.sum);
    core_.emit(sum);
    core_.emit(
        vec(rt::VecOp::kLog, row_values(b_.lse), row_values(b_.sum), r, 1));
    core_.emit(vec2(rt::VecOp::kAdd, row_values(b_.lse), row_values(b_.lse),
                    row_values(b_.max), r, 1));
    core_.emit(vec_imm(rt::VecOp::kMax, row_values(b_.tmp), row_values(b_.sum),
                       std::numeric_limits<float>::min(), r, 1));
    core_.emit(
        vec(rt::VecOp::kRecip, row_values(b_.tmp), row_values(b_.tmp), r, 1));
    core_.emit(vec2(rt::VecOp::kMul, spad_tile(b_.probs, t(), b_.probs_pitch),
                    sc, row_values(b_.tmp), r, n));
  }

  // out = probs @ v, rounded to q's dtype
  void output(uint64_t rows) {
    const rt::Tile acc = spad_tile(b_.acc, kF32, b_.acc_pitch);
    detail::emit_matmul_tile(core_, spad_tile(b_.probs, t(), b_.probs_pitch),
                             spad_tile(b_.v, t(), b_.v_pitch), acc, rows,
                             s_.dv(), s_.s(), 0);
    core_.emit(vec(rt::VecOp::kCopy, spad_tile(b_.out, t(), b_.out_pitch), acc,
                   u32(rows), u32(s_.dv())));
  }

  CoreBuilder& core_;
  const AttentionShape& s_;
  uint64_t rows_;
  Buffers b_{};
  uint64_t resident_ = UINT64_MAX;  // the batch whose keys are loaded
};

}  // namespace

rt::Program build_attention(const AttentionShape& s,
                            const AttentionOptions& o) {
  check_shape(s);
  const uint64_t rows = std::min<uint64_t>(s.l(), kBlockRows);
  const uint64_t need = footprint(s, rows);
  if (need > o.target.scratchpad_budget()) {
    throw KernelBuildError(rt::str(
        "attention: the keys and values of ", s.s(), " positions (head dim ",
        s.d(), ") and a block of ", rows, " query rows need ", need,
        " bytes of scratchpad, over the ", o.target.scratchpad_budget(),
        " available; compute it as separate products"));
  }
  ProgramBuilder builder(
      rt::str("attention_", s.l(), "x", s.s(), "x", s.d(), "x", s.dv()),
      o.target.cores(), o.target.scratchpad_budget());
  builder.add_arg("q", s.q.dtype, s.q.bytes(), false);
  builder.add_arg("k", s.q.dtype, s.k.bytes(), false);
  builder.add_arg("v", s.q.dtype, s.v.bytes(), false);
  builder.add_arg("out", s.q.dtype, s.out.bytes(), true);
  builder.add_arg("lse", kF32, s.lse.bytes(), true);
  if (s.bias) builder.add_arg("bias", s.q.dtype, s.bias->bytes(), false);
  // Blocks in (batch, rows) order, a contiguous run per core: neighbours
  // share a batch, whose keys and values stay loaded.
  const uint64_t per_batch = ceil_div(s.l(), rows);
  const uint64_t blocks = s.q.batch_count() * per_batch;
  const Split split{blocks, o.target.cores(), 1};
  for (uint32_t c = 0; c < split.used_parts(); ++c) {
    AttentionEmitter emitter(builder.core(c), s, rows);
    for (uint64_t i = split.begin(c); i < split.begin(c) + split.size(c); ++i) {
      emitter.block(i / per_batch, (i % per_batch) * rows);
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
