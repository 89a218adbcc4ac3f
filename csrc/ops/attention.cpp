// Scaled dot-product attention on spyre: F.scaled_dot_product_attention asks
// the backend which kernel to use (_fused_sdp_choice); spyre chooses the
// overrideable backend, so PyTorch calls
// _scaled_dot_product_fused_attention_overrideable, defined here. Without
// autograd, dropout or a shape the program cannot hold, it is one device
// program (kernels/attention.h: scores, row softmax and output per block of
// query rows, the scores never in device memory) returning the output and
// the row logsumexp. Otherwise it is the attention arithmetic in ATen
// operators on spyre tensors (matmuls, masking, softmax, dropout), which run
// as device kernels; registered for AutogradPrivateUse1 as well, so the
// backward is that decomposition's (autograd differentiates the operators
// it is made of).
#include "spyre/kernels/attention.h"

#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_safe_softmax.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_ops.h>
#include <ATen/ops/add.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"

namespace spyre::torch_glue::ops {
namespace {

bool needs_grad(const at::Tensor& t) {
  return t.defined() && t.requires_grad();
}

// The overrideable backend (one attention program) for inference on
// [B, H, L, d] tensors; PyTorch's math path otherwise: under autograd it
// differentiates its own operators without the logsumexp the fused op must
// also return, and it applies dropout. Differing head counts without
// enable_gqa are an error the math path raises with its own message.
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key,
                         const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask,
                         double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const bool heads_differ =
      query.dim() >= 3 && key.dim() >= 3 && query.size(-3) != key.size(-3);
  const bool grad =
      at::GradMode::is_enabled() &&
      (needs_grad(query) || needs_grad(key) || needs_grad(value) ||
       (attn_mask.has_value() && needs_grad(*attn_mask)));
  if ((heads_differ && !enable_gqa) || query.dim() != 4 || dropout_p > 0.0 ||
      grad) {
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// Key/value heads repeated to the query's (grouped-query attention: the
// overrideable op has no enable_gqa flag; the choice above only sends
// differing head counts here when GQA was asked for).
at::Tensor expand_heads(const at::Tensor& t, int64_t query_heads) {
  const int64_t heads = t.size(-3);
  if (heads == query_heads) return t;
  TORCH_CHECK(heads > 0 && query_heads % heads == 0,
              "spyre: scaled_dot_product_attention: the query's ", query_heads,
              " heads are not a multiple of the key/value's ", heads);
  return t.repeat_interleave(query_heads / heads, -3);
}

// The output as PyTorch's meta function of the op lays it out (its
// alloc_with_matching_layout): like the query (a [B, L, H, d] transpose
// stays one), so compiled graphs see the strides they were traced with.
at::Tensor empty_like_query(const at::Tensor& query, int64_t dv) {
  std::vector<int64_t> sizes = query.sizes().vec();
  sizes.back() = dv;
  if (query.size(-1) == dv) return at::empty_like(query);
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return query.stride(a) > query.stride(b);
  });
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, query.options());
}

// The mask as an additive bias in q's dtype (undefined without one): -inf
// where a boolean mask is false.
at::Tensor additive_bias(const at::Tensor& query,
                         const std::optional<at::Tensor>& attn_mask) {
  if (!attn_mask.has_value() || !attn_mask->defined()) return {};
  if (attn_mask->scalar_type() != at::kBool) {
    return attn_mask->to(query.scalar_type());
  }
  return at::zeros(attn_mask->sizes(), query.options())
      .masked_fill(attn_mask->logical_not(),
                   -std::numeric_limits<double>::infinity());
}

// The mask as a bias [B, Hk, rep, L, S] in q's dtype for `query` [B, H, L,
// d] grouped as Hk x rep heads: undefined without a mask, nullopt when the
// mask does not broadcast to [B, H, L, S].
std::optional<at::Tensor> grouped_bias(
    const at::Tensor& query, const std::optional<at::Tensor>& attn_mask,
    int64_t kv_heads, int64_t s) {
  at::Tensor bias = additive_bias(query, attn_mask);
  if (!bias.defined()) return bias;
  const int64_t b = query.size(0), heads = query.size(1), l = query.size(2);
  if (!at::is_expandable_to(bias.sizes(), {b, heads, l, s})) {
    return std::nullopt;
  }
  return bias.expand({b, heads, l, s})
      .unflatten(1, {kv_heads, heads / kv_heads});
}

// out [B, H, L, dv] and the row logsumexp [B, H, L] of one attention
// program over `query`'s heads grouped as [B, Hk, rep]: q, k, v (and bias)
// in that grouping; `key_rows` (defined: paged) [B, Hk, rep, 1, S] picks
// each key's row of the tables k and v. Nullopt when the program does not
// fit. Without `want_lse` the returned logsumexp may be any tensor holding
// it (not copied into the [B, H, L] layout).
std::optional<std::tuple<at::Tensor, at::Tensor>> run_attention(
    const at::Tensor& query, at::Tensor q, at::Tensor k, at::Tensor v,
    at::Tensor bias, at::Tensor key_rows, bool is_causal, double factor,
    int64_t kv_heads, int64_t dv, bool want_lse = true) {
  const int64_t b = query.size(0), heads = query.size(1), l = query.size(2);
  const int64_t rep = heads / kv_heads;
  const at::Tensor out = empty_like_query(query, dv);
  const at::Tensor lse =
      at::empty({b, heads, l}, query.options().dtype(at::kFloat));
  kernels::AttentionShape shape;
  shape.q = matrix_operand(q, 3);
  shape.k = matrix_operand(k, 3);
  shape.v = matrix_operand(v, 3);
  // out and lse as the program writes them: themselves, or (a layout it
  // cannot address, such as a one-row lse whose heads share a stick) a
  // fresh [B, H, rows of whole sticks] tensor copied into them after.
  at::Tensor out_written = out;
  std::optional<kernels::Matrix> out_matrix =
      matrix_view(out.unflatten(1, {kv_heads, rep}), 3);
  if (!out_matrix) {
    out_written = at::empty({b, heads, l, dv}, query.options());
    out_matrix = matrix_view(out_written.unflatten(1, {kv_heads, rep}), 3);
  }
  at::Tensor lse_written = lse;
  const auto lse_matrix = [&] {
    return matrix_view(lse_written.unflatten(1, {kv_heads, rep}).unsqueeze(-2),
                       3);
  };
  std::optional<kernels::Matrix> lse_rows = lse_matrix();
  if (!lse_rows) {
    const int64_t per_stick = rt::elements_per_stick(rt::DType::kFloat32);
    lse_written =
        at::empty({b, heads, (l + per_stick - 1) / per_stick * per_stick},
                  lse.options())
            .narrow(-1, 0, l);
    lse_rows = lse_matrix();
  }
  TORCH_INTERNAL_ASSERT(out_matrix && lse_rows,
                        "spyre: attention: fresh outputs are not addressable");
  shape.out = *out_matrix;
  shape.lse = *lse_rows;
  if (bias.defined()) shape.bias = matrix_operand(bias, 3);
  if (key_rows.defined()) shape.key_rows = matrix_operand(key_rows, 3);
  shape.scale = factor;
  shape.causal = is_causal;
  std::vector<at::Tensor> bound{q, k, v, out_written, lse_written};
  if (bias.defined()) bound.push_back(bias);
  if (key_rows.defined()) bound.push_back(key_rows);
  const c10::DeviceIndex device = query.device().index();
  const kernels::AttentionOptions options{{device_chip(device)}};
  kernels::KeyWriter program_key;
  program_key.add("attention").add(factor).add(bias.defined()).add(is_causal);
  program_key.add(key_rows.defined());
  for (const kernels::Matrix* m :
       {&shape.q, &shape.k, &shape.v, &shape.out, &shape.lse}) {
    append_key(program_key, *m);
  }
  if (shape.bias) append_key(program_key, *shape.bias);
  if (shape.key_rows) append_key(program_key, *shape.key_rows);
  try {
    launch_cached(
        device, ProgramKey(std::move(program_key)),
        [&] { return kernels::build_attention(shape, options); }, bound);
  } catch (const kernels::KernelBuildError&) {
    return std::nullopt;
  }
  if (!out_written.is_same(out)) out.copy_(out_written);
  if (!want_lse) return std::tuple{out, lse_written};
  if (!lse_written.is_same(lse)) lse.copy_(lse_written);
  return std::tuple{out, lse};
}

// out and the row logsumexp from one attention program, or nullopt when it
// does not apply (autograd, dropout, other ranks or dtypes, a mask that does
// not broadcast, keys and values too long for a scratchpad).
std::optional<std::tuple<at::Tensor, at::Tensor>> attention_program(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask, double dropout_p,
    bool is_causal, double factor) {
  const at::ScalarType t = query.scalar_type();
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4 ||
      dropout_p > 0.0 || key.scalar_type() != t || value.scalar_type() != t ||
      (t != at::kHalf && t != at::kBFloat16 && t != at::kFloat)) {
    return std::nullopt;
  }
  if (at::GradMode::is_enabled() &&
      (needs_grad(query) || needs_grad(key) || needs_grad(value) ||
       (attn_mask.has_value() && needs_grad(*attn_mask)))) {
    return std::nullopt;
  }
  const int64_t b = query.size(0), heads = query.size(1), l = query.size(2);
  const int64_t kv_heads = key.size(1), s = key.size(2), dv = value.size(3);
  if (key.size(0) != b || value.size(0) != b || value.size(1) != kv_heads ||
      value.size(2) != s || key.size(3) != query.size(3) || kv_heads == 0 ||
      heads % kv_heads != 0 || b * heads * l * s * dv == 0) {
    return std::nullopt;
  }
  const int64_t rep = heads / kv_heads;
  const std::optional<at::Tensor> bias =
      grouped_bias(query, attn_mask, kv_heads, s);
  if (!bias) return std::nullopt;
  // [B, Hk, rep, ...]: a query head reads the key/value head it groups with
  // (stride 0 over rep).
  return run_attention(
      query, query.unflatten(1, {kv_heads, rep}),
      key.unsqueeze(2).expand({b, kv_heads, rep, s, key.size(3)}),
      value.unsqueeze(2).expand({b, kv_heads, rep, s, dv}), *bias, at::Tensor(),
      is_causal, factor, kv_heads, dv);
}

using AttentionResult =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
               c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

// The op on spyre tensors: one attention program when `allow_program` and
// it applies, else the decomposition.
AttentionResult attention(const at::Tensor& query, const at::Tensor& key,
                          const at::Tensor& value,
                          const std::optional<at::Tensor>& attn_bias,
                          double dropout_p, bool is_causal,
                          bool return_debug_mask, std::optional<double> scale,
                          bool allow_program) {
  TORCH_CHECK(query.dim() >= 3 && key.dim() == query.dim() &&
                  value.dim() == query.dim(),
              "spyre: scaled_dot_product_attention expects query, key and "
              "value of one rank, at least 3 ([..., heads, length, dim]), got ",
              query.sizes(), ", ", key.sizes(), ", ", value.sizes());
  TORCH_CHECK(!return_debug_mask,
              "spyre: scaled_dot_product_attention has no debug mask on "
              "spyre; call it with return_debug_mask=False");
  const int64_t length = query.size(-2);
  const int64_t source = key.size(-2);
  const double factor =
      scale.has_value() ? *scale
                        : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const auto none = at::empty({0}, query.options().dtype(at::kLong));
  const auto finish = [&](at::Tensor output, at::Tensor logsumexp) {
    return std::tuple{std::move(output),
                      std::move(logsumexp),
                      none,
                      none,
                      c10::SymInt(length),
                      c10::SymInt(source),
                      at::zeros({}, query.options().dtype(at::kLong)),
                      at::zeros({}, query.options().dtype(at::kLong)),
                      at::empty({0}, query.options())};
  };
  if (auto fused = allow_program
                       ? attention_program(query, key, value, attn_bias,
                                           dropout_p, is_causal, factor)
                       : std::nullopt) {
    return finish(std::get<0>(*fused), std::get<1>(*fused));
  }
  const at::Tensor k = expand_heads(key, query.size(-3));
  const at::Tensor v = expand_heads(value, query.size(-3));
  // The scale split over both operands as PyTorch's math path does (keeps
  // float16 products in range).
  const double root = std::sqrt(factor);
  at::Tensor scores =
      at::matmul(at::mul(query, root), at::mul(k, root).transpose(-2, -1));
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const at::Tensor keep =
        at::ones({length, source}, query.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), minus_inf);
  }
  if (attn_bias.has_value() && attn_bias->defined()) {
    scores = attn_bias->scalar_type() == at::kBool
                 ? scores.masked_fill(attn_bias->logical_not(), minus_inf)
                 : at::add(scores, *attn_bias);
  }
  at::Tensor logsumexp = at::logsumexp(scores.to(at::kFloat), {-1});
  // A row masked everywhere attends to nothing (zeros, not NaN), as in
  // PyTorch's math path.
  at::Tensor attention = at::_safe_softmax(scores, -1);
  if (dropout_p > 0.0) attention = at::dropout(attention, dropout_p, true);
  at::Tensor output = empty_like_query(query, v.size(-1));
  output.copy_(at::matmul(attention, v));
  return finish(std::move(output), std::move(logsumexp));
}

AttentionResult fused_attention(const at::Tensor& query, const at::Tensor& key,
                                const at::Tensor& value,
                                const std::optional<at::Tensor>& attn_bias,
                                double dropout_p, bool is_causal,
                                bool return_debug_mask,
                                std::optional<double> scale) {
  return attention(query, key, value, attn_bias, dropout_p, is_causal,
                   return_debug_mask, scale, /*allow_program=*/true);
}

// Under autograd the decomposition, whose operators autograd records; else
// below autograd to the spyre kernel (or, for fake tensors while tracing,
// to the op's meta function).
AttentionResult autograd_fused_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& attn_bias, double dropout_p,
    bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  const bool grad =
      at::GradMode::is_enabled() &&
      (needs_grad(query) || needs_grad(key) || needs_grad(value) ||
       (attn_bias.has_value() && needs_grad(*attn_bias)));
  if (grad) {
    return attention(query, key, value, attn_bias, dropout_p, is_causal,
                     return_debug_mask, scale, /*allow_program=*/false);
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return at::_ops::_scaled_dot_product_fused_attention_overrideable::call(
      query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask,
      scale);
}

// torch.ops.spyre.paged_attention: attention of query [B, H, L, d] over a
// paged KV cache, key_cache [slots, Hk, d] and value_cache [slots, Hk, dv]
// (Hk divides H: grouped-query heads), where key j of request b is cache
// row key_rows[b, j] (int64 or int32 [B, S]). attn_mask (bool, True =
// attend, or additive) broadcasts to [B, H, L, S]; is_causal puts query i
// at key position i. One program that gathers the rows it reads (DMA
// gathers: the cache is never copied); when it cannot fit, the rows are
// gathered first and attended as scaled_dot_product_attention.
at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_cache,
                           const at::Tensor& value_cache,
                           const at::Tensor& key_rows,
                           const std::optional<at::Tensor>& attn_mask,
                           bool is_causal, std::optional<double> scale) {
  TORCH_CHECK(query.dim() == 4 && key_cache.dim() == 3 &&
                  value_cache.dim() == 3 && key_rows.dim() == 2,
              "spyre: paged_attention expects query [B, H, L, d], caches "
              "[slots, kv_heads, dim] and key_rows [B, S], got ",
              query.sizes(), ", ", key_cache.sizes(), ", ", value_cache.sizes(),
              ", ", key_rows.sizes());
  const int64_t b = query.size(0), heads = query.size(1), d = query.size(3);
  const int64_t slots = key_cache.size(0), kv_heads = key_cache.size(1);
  const int64_t s = key_rows.size(1), dv = value_cache.size(2);
  TORCH_CHECK(key_cache.size(2) == d && value_cache.size(0) == slots &&
                  value_cache.size(1) == kv_heads && key_rows.size(0) == b,
              "spyre: paged_attention: the caches must have the query's head "
              "dim and equal slots and heads, and key_rows one row per "
              "request; got query ",
              query.sizes(), ", caches ", key_cache.sizes(), " and ",
              value_cache.sizes(), ", key_rows ", key_rows.sizes());
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0,
              "spyre: paged_attention: the query's ", heads,
              " heads are not a multiple of the cache's ", kv_heads);
  TORCH_CHECK(key_cache.scalar_type() == query.scalar_type() &&
                  value_cache.scalar_type() == query.scalar_type(),
              "spyre: paged_attention: the caches must have the query's "
              "dtype ",
              query.scalar_type());
  TORCH_CHECK(
      key_rows.scalar_type() == at::kLong || key_rows.scalar_type() == at::kInt,
      "spyre: paged_attention: key_rows must be int64 or int32, got ",
      key_rows.scalar_type());
  for (const at::Tensor* t : {&key_cache, &value_cache, &key_rows}) {
    TORCH_CHECK(t->device() == query.device(),
                "spyre: paged_attention: expected every tensor on ",
                query.device(), ", got ", t->device());
  }
  const double factor =
      scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t rep = heads / kv_heads;
  // The caches as tables, one head each: [B (stride 0), Hk, rep (stride 0),
  // slots, dim]; only addressed as they are, never copied.
  const auto table = [&](const at::Tensor& cache) {
    return cache.transpose(0, 1).unsqueeze(0).unsqueeze(2).expand(
        {b, kv_heads, rep, slots, cache.size(2)});
  };
  const at::Tensor k = table(key_cache), v = table(value_cache);
  const std::optional<at::Tensor> bias =
      grouped_bias(query, attn_mask, kv_heads, s);
  const bool fits = query.numel() > 0 && s > 0 && dv > 0 && bias &&
                    matrix_view(k, 3) && matrix_view(v, 3) &&
                    (query.scalar_type() == at::kHalf ||
                     query.scalar_type() == at::kBFloat16 ||
                     query.scalar_type() == at::kFloat);
  if (fits) {
    const at::Tensor rows =
        key_rows.view({b, 1, 1, 1, s}).expand({b, kv_heads, rep, 1, s});
    if (auto result = run_attention(query, query.unflatten(1, {kv_heads, rep}),
                                    k, v, *bias, rows, is_causal, factor,
                                    kv_heads, dv, /*want_lse=*/false)) {
      return std::get<0>(*result);
    }
  }
  const at::Tensor flat = key_rows.reshape({-1});
  const auto gathered = [&](const at::Tensor& cache) {
    return cache.index_select(0, flat)
        .view({b, s, kv_heads, cache.size(2)})
        .transpose(1, 2);
  };
  return std::get<0>(attention(query, gathered(key_cache),
                               gathered(value_cache), attn_mask, 0.0, is_causal,
                               false, scale,
                               /*allow_program=*/true));
}

TORCH_LIBRARY(spyre, m) {
  m.def(
      "paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, "
      "Tensor key_rows, Tensor? attn_mask=None, bool is_causal=False, "
      "float? scale=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) {
  m.impl("paged_attention", TORCH_FN(paged_attention));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(fused_attention));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(autograd_fused_attention));
}

}  // namespace
}  // namespace spyre::torch_glue::ops

// F.scaled_dot_product_attention asks this stub, not the dispatcher, which
// backend to take.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &spyre::torch_glue::ops::fused_sdp_choice)
}  // namespace at::native
