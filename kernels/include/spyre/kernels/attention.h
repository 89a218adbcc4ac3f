// Scaled dot-product attention in one program:
//   out = softmax(scale * q @ k^T + bias) @ v, lse = logsumexp of each row
// of the scaled, biased scores (what fused attention kernels return for the
// backward).
//
// Every batch (a (batch, head) pair of the caller) is a group of query-row
// blocks; blocks are spread over the cores. A core keeps the keys (and
// their transpose, made once on the vector unit) and the values of the
// batch it works on resident, so each block is one matrix instruction for
// the scores, the row softmax on the vector unit in fp32, and one matrix
// instruction for the output: the scores never go to device memory. The
// probabilities are rounded to q's dtype before the second product, as an
// unfused softmax followed by a matmul would store them.
//
// A row whose scores are all -inf (every key masked) gives zeros and an lse
// of -inf, as PyTorch's math path (its _safe_softmax) does.
#pragma once

#include <cstdint>
#include <optional>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct AttentionShape {
  Matrix q;    // L x d, fp16 / bf16 / fp32
  Matrix k;    // S x d, q's dtype
  Matrix v;    // S x dv, q's dtype
  Matrix out;  // L x dv, q's dtype
  Matrix lse;  // 1 x L, fp32
  // L x S in q's dtype, added to the scaled scores (a mask: -inf where a
  // key is hidden); its rows may repeat (row stride 0).
  std::optional<Matrix> bias;
  // Query i attends to keys j <= i only (PyTorch's is_causal: the mask's
  // diagonal at the top left). Key blocks wholly above it are skipped.
  bool causal = false;
  double scale = 1;
  // Paged keys and values (a KV cache in blocks): key position j of batch b
  // is row key_rows[b](0, j) of k and v, which are then tables (one row
  // dimension: the cache's slots, one head per batch) read by DMA gathers,
  // never copied whole. int64 or int32, 1 x S per batch (stride 0 across
  // the heads of one request). A row outside the table is a device error.
  std::optional<Matrix> key_rows;

  uint64_t l() const { return q.rows; }
  uint64_t s() const { return key_rows ? key_rows->cols : k.rows; }
  uint64_t d() const { return q.cols; }
  uint64_t dv() const { return v.cols; }
};

struct AttentionOptions {
  Target target;  // the device planned for (program_builder.h)
};

// Slots: 0 = q, 1 = k, 2 = v, 3 = out, 4 = lse (outputs), then bias and
// key_rows when given, in that order. All operands list the same batches
// (stride 0 repeats one, as grouped-query attention's keys do). Throws
// KernelBuildError when the shapes disagree or the keys and values of one batch
// do not fit a scratchpad (long sequences: compute it as separate products
// then).
rt::Program build_attention(const AttentionShape& shape,
                            const AttentionOptions& options);

}  // namespace spyre::kernels
