// Scaled dot-product attention on spyre: F.scaled_dot_product_attention asks
// the backend which kernel to use (_fused_sdp_choice); spyre chooses the
// overrideable backend, so PyTorch calls
// _scaled_dot_product_fused_attention_overrideable, defined here as the
// attention arithmetic in ATen operators on spyre tensors (matmuls, masking,
// softmax, dropout), which run as device kernels or through the fallback.
// It returns the output and the row logsumexp (float32) the fused kernels
// return. Registered for AutogradPrivateUse1 as well, so the backward is the
// decomposition's (autograd differentiates the operators it is made of).
#include <ATen/SDPBackend.h>
#include <ATen/ops/_safe_softmax.h>
#include <ATen/ops/add.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace spyre::torch_glue::ops {
namespace {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key,
                         const at::Tensor& /*value*/,
                         const std::optional<at::Tensor>& /*attn_mask*/,
                         double /*dropout_p*/, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  // Differing head counts without enable_gqa are an error PyTorch's math
  // path raises with its own message.
  const bool heads_differ =
      query.dim() >= 3 && key.dim() >= 3 && query.size(-3) != key.size(-3);
  if (heads_differ && !enable_gqa) {
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
           c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key,
                const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double dropout_p,
                bool is_causal, bool return_debug_mask,
                std::optional<double> scale) {
  TORCH_CHECK(query.dim() >= 3 && key.dim() == query.dim() &&
                  value.dim() == query.dim(),
              "spyre: scaled_dot_product_attention expects query, key and "
              "value of one rank, at least 3 ([..., heads, length, dim]), got ",
              query.sizes(), ", ", key.sizes(), ", ", value.sizes());
  TORCH_CHECK(!return_debug_mask,
              "spyre: scaled_dot_product_attention has no debug mask on "
              "spyre; call it with return_debug_mask=False");
  const int64_t heads = query.size(-3);
  const at::Tensor k = expand_heads(key, heads);
  const at::Tensor v = expand_heads(value, heads);
  const int64_t length = query.size(-2);
  const int64_t source = k.size(-2);
  const double factor =
      scale.has_value() ? *scale
                        : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
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
  at::Tensor output = at::matmul(attention, v);
  const auto none = at::empty({0}, query.options().dtype(at::kLong));
  return {std::move(output),
          std::move(logsumexp),
          none,
          none,
          c10::SymInt(length),
          c10::SymInt(source),
          at::zeros({}, query.options().dtype(at::kLong)),
          at::zeros({}, query.options().dtype(at::kLong)),
          at::empty({0}, query.options())};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(fused_attention));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(fused_attention));
}

}  // namespace
}  // namespace spyre::torch_glue::ops
