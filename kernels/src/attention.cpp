#include "spyre/kernels/attention.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "matmul_parts.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;
constexpr uint32_t kF32Bytes = 4;

enum Slot : uint32_t { kQ = 0, kK = 1, kV = 2, kOut = 3, kLse = 4, kBias = 5 };

bool same_batches(const Matrix& a, const Matrix& b) {
  if (a.batch_dims.size() != b.batch_dims.size()) return false;
  for (size_t i = 0; i < a.batch_dims.size(); ++i) {
    if (a.batch_dims[i].size != b.batch_dims[i].size) return false;
  }
  return true;
}

void check_paged(const AttentionShape& s) {
  const Matrix& index = *s.key_rows;
  if (index.dtype != rt::DType::kInt64 && index.dtype != rt::DType::kInt32) {
    throw KernelBuildError("attention: key rows must be int64 or int32");
  }
  if (index.rows != 1 || !same_batches(s.q, index)) {
    throw KernelBuildError(
        "attention: key rows are one row of positions per batch of q");
  }
  for (const Matrix* m : {&s.k, &s.v}) {
    if (m->strided_form().row_dims.size() != 1 || m->rows == 0) {
      throw KernelBuildError(
          "attention: paged keys and values are tables with one row "
          "dimension");
    }
  }
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
  const uint64_t key_rows = s.key_rows ? s.k.rows : s.s();
  if (s.k.cols != s.d() || s.v.rows != key_rows || s.out.rows != s.l() ||
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
  if (s.key_rows) check_paged(s);
  if (s.l() == 0 || s.s() == 0 || s.d() == 0 || s.dv() == 0) {
    throw KernelBuildError("attention over an empty matrix needs no program");
  }
}

// Query rows and key positions one block works on.
struct Blocking {
  uint64_t rows = 0;  // query rows per block (a multiple of an fp32 stick)
  uint64_t keys = 0;  // key positions per key block: all, or whole sticks
};

// Scratchpad buffers of one core (offsets) and their row pitches.
struct Buffers {
  uint32_t q, k, kt, v, scores, probs, acc, out, bias;
  uint32_t mask, key_index, query_index, minus_inf;  // causal masking
  uint32_t max, safe_max, sum, alpha, lse;
  uint32_t key_rows;  // paged: the key block's table rows
  uint32_t q_pitch, k_pitch, kt_pitch, v_pitch, scores_pitch, probs_pitch,
      acc_pitch, out_pitch, bias_pitch, stats_pitch;
};

// The bytes of each buffer, in reservation order; `reserve` gets each.
template <typename Reserve>
Buffers lay_out(const AttentionShape& s, Blocking k, Reserve&& reserve) {
  const rt::DType t = s.q.dtype;
  Buffers b{};
  b.q_pitch = padded_row_bytes(s.d(), t);
  b.k_pitch = padded_row_bytes(s.d(), t);
  b.kt_pitch = padded_row_bytes(k.keys, t);
  b.v_pitch = padded_row_bytes(s.dv(), t);
  b.scores_pitch = padded_row_bytes(k.keys, kF32);
  b.probs_pitch = padded_row_bytes(k.keys, t);
  b.acc_pitch = padded_row_bytes(s.dv(), kF32);
  b.out_pitch = padded_row_bytes(s.dv(), t);
  b.bias_pitch = padded_row_bytes(k.keys, t);
  b.stats_pitch = padded_row_bytes(k.rows, kF32);
  b.q = reserve(k.rows * b.q_pitch, "attention q block");
  b.k = reserve(k.keys * b.k_pitch, "attention keys");
  b.kt = reserve(s.d() * b.kt_pitch, "attention keys transposed");
  b.v = reserve(k.keys * b.v_pitch, "attention values");
  b.scores = reserve(k.rows * b.scores_pitch, "attention scores");
  b.probs = reserve(k.rows * b.probs_pitch, "attention probabilities");
  b.acc = reserve(k.rows * b.acc_pitch, "attention accumulator");
  b.out = reserve(k.rows * b.out_pitch, "attention output block");
  b.bias = s.bias ? reserve(k.rows * b.bias_pitch, "attention bias") : 0;
  if (s.causal) {
    b.mask = reserve(k.rows * padded_row_bytes(k.keys, rt::DType::kBool),
                     "attention causal mask");
    b.key_index = reserve(padded_row_bytes(k.keys, kF32), "attention keys");
    b.query_index = reserve(padded_row_bytes(k.rows, kF32), "attention rows");
    b.minus_inf = reserve(kF32Bytes, "attention -inf");
  }
  b.key_rows = s.key_rows ? reserve(padded_row_bytes(k.keys, s.key_rows->dtype),
                                    "attention key rows")
                          : 0;
  b.max = reserve(b.stats_pitch, "attention row max");
  b.safe_max = reserve(b.stats_pitch, "attention finite row max");
  b.sum = reserve(b.stats_pitch, "attention row sum");
  b.alpha = reserve(b.stats_pitch, "attention rescale");
  b.lse = reserve(b.stats_pitch, "attention lse");
  return b;
}

uint64_t footprint(const AttentionShape& s, Blocking k) {
  uint64_t total = 0;
  lay_out(s, k, [&](uint64_t bytes, const char*) {
    total += ceil_div(bytes, rt::kStickBytes) * rt::kStickBytes;
    return 0u;
  });
  return total;
}

// The largest blocks that fit: every key resident (read once per batch)
// with 64 or 32 query rows; else 64 (32) rows against key blocks of
// as many whole sticks of positions as fit (the softmax then runs online
// over the key blocks). Nullopt when not even one stick of keys fits.
std::optional<Blocking> plan_blocks(const AttentionShape& s, uint64_t budget) {
  const uint64_t stick = rt::elements_per_stick(s.q.dtype);
  for (uint64_t rows : {uint64_t{64}, uint64_t{32}}) {
    Blocking k{std::min(s.l(), rows), s.s()};
    if (footprint(s, k) <= budget) return k;
  }
  for (uint64_t rows : {uint64_t{64}, uint64_t{32}}) {
    Blocking k{std::min(s.l(), rows), 0};
    for (uint64_t n = s.s() / stick; n >= 1; n /= 2) {
      if (footprint(s, {k.rows, n * stick}) <= budget) {
        k.keys = n * stick;
        return k;
      }
    }
  }
  return std::nullopt;
}

// One value per row of a block, rows 4 bytes apart: a column that row-wise
// vector ops broadcast along the row.
rt::Tile row_values(uint32_t at) { return rt::Tile{at, kF32, kF32Bytes, 0}; }

// Per block of query rows, over the key blocks (flash attention's online
// softmax): s = scale * q k^T + bias; m' = max(m, rowmax s); p = exp(s -
// m'), rounded to q's dtype; l = l * exp(m - m') + rowsum p; acc = acc *
// exp(m - m') + p v. Then out = acc / l and lse = m + log l. Maxima enter
// exp as at least the lowest finite float, so a row of -inf scores keeps
// exp 0 everywhere, l = 0 (divided as the smallest normal: zeros) and lse
// -inf.
class AttentionEmitter {
 public:
  AttentionEmitter(CoreBuilder& core, const AttentionShape& s, Blocking k)
      : core_(core), s_(s), k_(k) {
    b_ = lay_out(s, k, [&](uint64_t bytes, const char* what) {
      return core_.reserve(static_cast<uint32_t>(bytes), what);
    });
    if (s.causal) {
      rt::Vector fill =
          vec(rt::VecOp::kFill, {b_.minus_inf, kF32, 0, 4}, {}, 1, 1);
      fill.imm = -std::numeric_limits<double>::infinity();
      core_.emit(fill);
    }
  }

  void block(uint64_t batch, uint64_t r0) {
    const uint64_t rows = std::min(k_.rows, s_.l() - r0);
    core_.load(s_.q.tiles(kQ, r0, rows, 0, s_.d(), b_.q, b_.q_pitch, batch));
    // causal: no row of this block sees a key past its last row
    const uint64_t end = s_.causal ? std::min(s_.s(), r0 + rows) : s_.s();
    for (uint64_t k0 = 0; k0 < end; k0 += k_.keys) {
      const uint64_t keys = std::min(k_.keys, s_.s() - k0);
      // every key resident: loaded once per batch
      if (keys != s_.s() || batch != resident_) {
        load_keys_and_values(batch, k0, keys);
      }
      scores(batch, r0, rows, k0, keys);
      accumulate(rows, keys, k0 == 0);
    }
    finish(rows);
    core_.store(
        s_.out.tiles(kOut, r0, rows, 0, s_.dv(), b_.out, b_.out_pitch, batch));
    core_.store(
        s_.lse.tiles(kLse, 0, 1, r0, rows, b_.lse, b_.stats_pitch, batch));
  }

 private:
  rt::DType t() const { return s_.q.dtype; }
  uint32_t u32(uint64_t v) const { return static_cast<uint32_t>(v); }
  rt::Tile scores_tile() const {
    return spad_tile(b_.scores, kF32, b_.scores_pitch);
  }

  // Keys [k0, k0 + keys), transposed on the vector unit (the matrix unit
  // reads row-contiguous B fastest), and their values.
  void load_keys_and_values(uint64_t batch, uint64_t k0, uint64_t keys) {
    if (s_.key_rows) {
      const Matrix& index = *s_.key_rows;
      core_.load(index.tiles(key_rows_slot(), 0, 1, k0, keys, b_.key_rows,
                             padded_row_bytes(keys, index.dtype), batch));
      gather(s_.k, kK, b_.k, b_.k_pitch, batch, keys);
    } else {
      core_.load(s_.k.tiles(kK, k0, keys, 0, s_.d(), b_.k, b_.k_pitch, batch));
    }
    core_.emit(vec(rt::VecOp::kCopy, spad_tile(b_.kt, t(), b_.kt_pitch),
                   transposed(spad_tile(b_.k, t(), b_.k_pitch)), u32(s_.d()),
                   u32(keys)));
    if (s_.key_rows) {
      gather(s_.v, kV, b_.v, b_.v_pitch, batch, keys);
    } else {
      core_.load(s_.v.tiles(kV, k0, keys, 0, s_.dv(), b_.v, b_.v_pitch, batch));
    }
    resident_ = batch;
  }

  uint32_t key_rows_slot() const { return s_.bias ? kBias + 1 : kBias; }

  // Rows key_rows (loaded at b_.key_rows) of table `m`'s batch into the
  // scratchpad at `spad`, `pitch` apart: one gather per stick of a row
  // unless a row's sticks are contiguous.
  void gather(const Matrix& m, uint32_t slot, uint32_t spad, uint32_t pitch,
              uint64_t batch, uint64_t keys) {
    const Matrix table = m.strided_form(batch);
    const uint64_t sticks = table.sticks_per_row();
    const bool contiguous_row = table.stick_stride == rt::kStickBytes;
    for (uint64_t st = 0; st < (contiguous_row ? 1 : sticks); ++st) {
      rt::DmaGather g;
      g.table = {slot, table.offset + st * table.stick_stride};
      g.table_rows = table.rows;
      g.table_row_stride = static_cast<uint64_t>(table.row_dims[0].stride);
      g.row_bytes = u32((contiguous_row ? sticks : 1) * rt::kStickBytes);
      g.index_spad = b_.key_rows;
      g.index_dtype = s_.key_rows->dtype;
      g.count = u32(keys);
      g.spad = spad + u32(st * rt::kStickBytes);
      g.spad_stride = pitch;
      core_.emit(g);
    }
  }

  // scores = scale * q @ k^T + bias, in fp32
  void scores(uint64_t batch, uint64_t r0, uint64_t rows, uint64_t k0,
              uint64_t keys) {
    const rt::Tile sc = scores_tile();
    detail::emit_matmul_tile(core_, spad_tile(b_.q, t(), b_.q_pitch),
                             spad_tile(b_.kt, t(), b_.kt_pitch), sc, rows, keys,
                             s_.d(), 0);
    if (s_.scale != 1) {
      core_.emit(
          vec_imm(rt::VecOp::kMul, sc, sc, s_.scale, u32(rows), u32(keys)));
    }
    if (s_.bias) {
      core_.load(s_.bias->tiles(kBias, r0, rows, k0, keys, b_.bias,
                                b_.bias_pitch, batch));
      core_.emit(vec2(rt::VecOp::kAdd, sc, sc,
                      spad_tile(b_.bias, t(), b_.bias_pitch), u32(rows),
                      u32(keys)));
    }
    if (s_.causal && k0 + keys > r0 + 1) mask_future(r0, rows, k0, keys);
  }

  // scores of keys past their query's position: -inf (key index k0 + c
  // against query index r0 + r)
  void mask_future(uint64_t r0, uint64_t rows, uint64_t k0, uint64_t keys) {
    const uint32_t r = u32(rows), n = u32(keys);
    rt::Vector key_index =
        vec(rt::VecOp::kIota, {b_.key_index, kF32, 0, 4}, {}, 1, n);
    key_index.imm = static_cast<double>(k0);
    key_index.imm2 = 1;
    core_.emit(key_index);
    rt::Vector query_index = key_index;
    query_index.dst = row_values(b_.query_index);
    query_index.rows = r;
    query_index.cols = 1;
    query_index.imm = static_cast<double>(r0);
    core_.emit(query_index);
    const rt::Tile mask{
        b_.mask, rt::DType::kBool,
        static_cast<int32_t>(padded_row_bytes(k_.keys, rt::DType::kBool)), 1};
    core_.emit(vec2(rt::VecOp::kGt, mask, {b_.key_index, kF32, 0, 4},
                    row_values(b_.query_index), r, n));
    rt::Vector select = vec(rt::VecOp::kSelect, scores_tile(), mask, r, n);
    select.src1 = {b_.minus_inf, kF32, 0, 0};
    select.src2 = scores_tile();
    core_.emit(select);
  }

  void reduce(rt::RedOp op, uint32_t dst, uint32_t rows, uint32_t cols,
              bool accumulate) {
    rt::Reduce r;
    r.op = op;
    r.dst = row_values(dst);
    r.src = scores_tile();
    r.rows = rows;
    r.cols = cols;
    r.accumulate = accumulate;
    core_.emit(r);
  }

  // One key block into the running max, sum and accumulator.
  void accumulate(uint64_t rows, uint64_t keys, bool first) {
    const uint32_t r = u32(rows), n = u32(keys);
    const rt::Tile sc = scores_tile();
    const rt::Tile acc = spad_tile(b_.acc, kF32, b_.acc_pitch);
    const double lowest = -std::numeric_limits<float>::max();
    if (!first) {  // the previous block's finite max, for the rescale
      core_.emit(vec(rt::VecOp::kCopy, row_values(b_.alpha),
                     row_values(b_.safe_max), r, 1));
    }
    reduce(rt::RedOp::kMax, b_.max, r, n, !first);
    core_.emit(vec_imm(rt::VecOp::kMax, row_values(b_.safe_max),
                       row_values(b_.max), lowest, r, 1));
    core_.emit(vec2(rt::VecOp::kSub, sc, sc, row_values(b_.safe_max), r, n));
    core_.emit(vec(rt::VecOp::kExp, sc, sc, r, n));
    if (!first) {
      // alpha = exp(old max - new max) rescales what earlier blocks summed
      core_.emit(vec2(rt::VecOp::kSub, row_values(b_.alpha),
                      row_values(b_.alpha), row_values(b_.safe_max), r, 1));
      core_.emit(vec(rt::VecOp::kExp, row_values(b_.alpha),
                     row_values(b_.alpha), r, 1));
      core_.emit(vec2(rt::VecOp::kMul, row_values(b_.sum), row_values(b_.sum),
                      row_values(b_.alpha), r, 1));
      core_.emit(vec2(rt::VecOp::kMul, acc, acc, row_values(b_.alpha), r,
                      u32(s_.dv())));
    }
    reduce(rt::RedOp::kSum, b_.sum, r, n, !first);
    const rt::Tile probs = spad_tile(b_.probs, t(), b_.probs_pitch);
    core_.emit(vec(rt::VecOp::kCopy, probs, sc, r, n));
    detail::emit_matmul_tile(core_, probs, spad_tile(b_.v, t(), b_.v_pitch),
                             acc, rows, s_.dv(), keys, first ? 0 : 1);
  }

  // out = acc / sum, rounded to q's dtype; lse = max + log(sum)
  void finish(uint64_t rows) {
    const uint32_t r = u32(rows);
    core_.emit(
        vec(rt::VecOp::kLog, row_values(b_.lse), row_values(b_.sum), r, 1));
    core_.emit(vec2(rt::VecOp::kAdd, row_values(b_.lse), row_values(b_.lse),
                    row_values(b_.max), r, 1));
    core_.emit(vec_imm(rt::VecOp::kMax, row_values(b_.alpha),
                       row_values(b_.sum), std::numeric_limits<float>::min(), r,
                       1));
    core_.emit(vec(rt::VecOp::kRecip, row_values(b_.alpha),
                   row_values(b_.alpha), r, 1));
    core_.emit(vec2(rt::VecOp::kMul, spad_tile(b_.out, t(), b_.out_pitch),
                    spad_tile(b_.acc, kF32, b_.acc_pitch), row_values(b_.alpha),
                    r, u32(s_.dv())));
  }

  CoreBuilder& core_;
  const AttentionShape& s_;
  Blocking k_;
  Buffers b_{};
  uint64_t resident_ = UINT64_MAX;  // the batch whose keys are all loaded
};

}  // namespace

rt::Program build_attention(const AttentionShape& s,
                            const AttentionOptions& o) {
  check_shape(s);
  const std::optional<Blocking> blocks =
      plan_blocks(s, o.target.scratchpad_budget());
  if (!blocks) {
    throw KernelBuildError(rt::str(
        "attention: one stick of keys (head dim ", s.d(), ", value dim ",
        s.dv(), ") and 32 query rows need more than the ",
        o.target.scratchpad_budget(), " bytes of scratchpad available"));
  }
  ProgramBuilder builder(
      rt::str(s.key_rows ? "paged_attention_" : "attention_", s.l(), "x", s.s(),
              "x", s.d(), "x", s.dv(), s.causal ? "_causal" : ""),
      o.target.cores(), o.target.scratchpad_budget());
  builder.add_arg("q", s.q.dtype, s.q.bytes(), false);
  builder.add_arg("k", s.q.dtype, s.k.bytes(), false);
  builder.add_arg("v", s.q.dtype, s.v.bytes(), false);
  builder.add_arg("out", s.q.dtype, s.out.bytes(), true);
  builder.add_arg("lse", kF32, s.lse.bytes(), true);
  if (s.bias) builder.add_arg("bias", s.q.dtype, s.bias->bytes(), false);
  if (s.key_rows) {
    builder.add_arg("key_rows", s.key_rows->dtype, s.key_rows->bytes(), false);
  }
  // Blocks in (batch, rows) order, a contiguous run per core: neighbours
  // share a batch, whose keys and values stay loaded when all fit.
  const uint64_t per_batch = ceil_div(s.l(), blocks->rows);
  const uint64_t count = s.q.batch_count() * per_batch;
  const Split split{count, o.target.cores(), 1};
  for (uint32_t c = 0; c < split.used_parts(); ++c) {
    AttentionEmitter emitter(builder.core(c), s, *blocks);
    for (uint64_t i = split.begin(c); i < split.begin(c) + split.size(c); ++i) {
      emitter.block(i / per_batch, (i % per_batch) * blocks->rows);
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
