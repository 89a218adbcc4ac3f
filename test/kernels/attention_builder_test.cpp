// Attention in one program (spyre/kernels/attention.h) on the emulator,
// against a double-precision reference of softmax(scale * q k^T + bias) v
// and its row logsumexp: batches, ragged row blocks, broadcast bias rows,
// keys shared by several query heads (stride-0 batches), fully masked rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_library_util.h"
#include "spyre/kernels/attention.h"

namespace spyre::sim::test {
namespace {

using kernels::AttentionShape;
using kernels::Matrix;
using rt::DType;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  uint64_t batches = 1, l = 1, s = 1, d = 1, dv = 1;
  bool bias = false, bias_rows_repeat = false, shared_keys = false;
  bool causal = false;
  // keys and values in tables of table_rows(s) rows, read at random rows
  // (repeats included) through key_rows: a paged KV cache
  bool paged = false;
  double scale = 1;
  uint32_t cores = 0;
  uint32_t scratchpad = 0;  // bytes a core may use; 0: the chip's
};

Matrix batched(uint64_t rows, uint64_t cols, DType t, uint64_t batches,
               bool repeat = false) {
  Matrix m = Matrix::stick_columns(rows, cols, t);
  m.batch_dims = {{batches, repeat ? 0 : static_cast<int64_t>(m.bytes())}};
  return m;
}

uint64_t table_rows(const Case& c) { return c.paged ? 2 * c.s + 3 : c.s; }

AttentionShape shape_of(const Case& c, DType t) {
  AttentionShape s;
  s.q = batched(c.l, c.d, t, c.batches);
  s.k = batched(table_rows(c), c.d, t, c.batches, c.shared_keys);
  s.v = batched(table_rows(c), c.dv, t, c.batches, c.shared_keys);
  if (c.paged) {
    s.key_rows = batched(1, c.s, DType::kInt64, c.batches, c.shared_keys);
  }
  s.out = batched(c.l, c.dv, t, c.batches);
  s.lse = batched(1, c.l, DType::kFloat32, c.batches);
  if (c.bias) {
    Matrix b = Matrix::strided(t, 0, {{c.l, c.bias_rows_repeat ? 0 : 128}}, c.s,
                               static_cast<int64_t>(c.l * 128));
    if (c.bias_rows_repeat) b.stick_stride = 128;
    b.batch_dims = {{c.batches, static_cast<int64_t>(c.l * c.s * 128)}};
    s.bias = b;
  }
  s.scale = c.scale;
  s.causal = c.causal;
  return s;
}

void check_attention(const Case& c, DType t, double tol) {
  const AttentionShape s = shape_of(c, t);
  kernels::AttentionOptions o{sim_target(c.cores)};
  if (c.scratchpad != 0) {
    o.target.chip.scratchpad_bytes =
        o.target.chip.scratchpad_reserve + c.scratchpad;
  }
  const rt::Program program = kernels::build_attention(s, o);
  uint64_t gathers = 0;
  for (const rt::CoreProgram& core : program.cores) {
    for (const rt::Instruction& inst : core.instructions) {
      gathers += std::holds_alternative<rt::DmaGather>(inst);
    }
  }
  EXPECT_EQ(gathers > 0, c.paged);  // paged keys are never loaded as tiles
  std::mt19937 rng(7);
  std::vector<Image> images;
  for (const Matrix* m : {&s.q, &s.k, &s.v, &s.out, &s.lse}) {
    images.emplace_back(m->bytes());
  }
  images[0].fill(s.q, rng, -2, 2);
  images[1].fill(s.k, rng, -2, 2);
  images[2].fill(s.v, rng, -1, 1);
  if (s.bias) {
    images.emplace_back(s.bias->bytes());
    images.back().fill(*s.bias, rng, -1, 1);
    // the first row of every batch sees no key; the second only key 0
    for (uint64_t b = 0; b < c.batches; ++b) {
      for (uint64_t j = 0; j < c.s; ++j) {
        images.back().put(*s.bias, b, 0, j, -kInf);
        if (c.l > 1 && j > 0 && !c.bias_rows_repeat) {
          images.back().put(*s.bias, b, 1, j, -kInf);
        }
      }
    }
  }
  // where batch b's key j lives in its table
  std::vector<std::vector<uint64_t>> rows(c.batches);
  std::uniform_int_distribution<uint64_t> row_of(0, table_rows(c) - 1);
  if (s.key_rows) images.emplace_back(s.key_rows->bytes());
  for (uint64_t b = 0; b < c.batches; ++b) {
    for (uint64_t j = 0; j < c.s; ++j) {
      const uint64_t shared = c.shared_keys ? 0 : b;
      if (!c.paged) {
        rows[b].push_back(j);
      } else if (b != shared) {
        rows[b].push_back(rows[shared][j]);
      } else {
        rows[b].push_back(row_of(rng));
        images.back().put(*s.key_rows, b, 0, j,
                          static_cast<double>(rows[b][j]));
      }
    }
  }
  std::vector<Image> inputs = images;
  auto device = small_device();
  run_images(*device, program, images);
  for (uint64_t b = 0; b < c.batches; ++b) {
    for (uint64_t i = 0; i < c.l; ++i) {
      std::vector<double> score(c.s);
      double max = -kInf;
      for (uint64_t j = 0; j < c.s; ++j) {
        double dot = 0;
        for (uint64_t x = 0; x < c.d; ++x) {
          dot += inputs[0].get(s.q, b, i, x) *
                 inputs[1].get(s.k, b, rows[b][j], x);
        }
        score[j] =
            c.scale * dot + (s.bias ? inputs[5].get(*s.bias, b, i, j) : 0);
        if (c.causal && j > i) score[j] = -kInf;
        max = std::max(max, score[j]);
      }
      double sum = 0;
      for (double& x : score) sum += (x = std::exp(x - max));
      const double lse = images[4].get(s.lse, b, 0, i);
      if (max == -kInf) {
        EXPECT_EQ(lse, -kInf) << "batch " << b << " row " << i;
      } else {
        EXPECT_NEAR(lse, max + std::log(sum), 1e-4 * (1 + std::abs(lse)))
            << "batch " << b << " row " << i;
      }
      for (uint64_t y = 0; y < c.dv; ++y) {
        double want = 0;
        if (max != -kInf) {
          for (uint64_t j = 0; j < c.s; ++j) {
            want += score[j] / sum * inputs[2].get(s.v, b, rows[b][j], y);
          }
        }
        const double got = images[3].get(s.out, b, i, y);
        ASSERT_NEAR(got, want, tol * (1 + std::abs(want)))
            << "batch " << b << " out[" << i << ", " << y << "]";
      }
    }
  }
}

class Attention : public ::testing::TestWithParam<DType> {
 protected:
  double tol() const {
    return GetParam() == DType::kFloat32   ? 1e-5
           : GetParam() == DType::kFloat16 ? 4e-3
                                           : 3e-2;
  }
};

TEST_P(Attention, BatchesOfHeadsWithoutBias) {
  check_attention({.batches = 6,
                   .l = 13,
                   .s = 13,
                   .d = 32,
                   .dv = 32,
                   .scale = 1 / std::sqrt(32.0)},
                  GetParam(), tol());
}

TEST_P(Attention, RaggedRowBlocksOverFewCores) {
  // 150 query rows: blocks of 64, 64 and 22; keys not a stick multiple.
  check_attention({.batches = 3,
                   .l = 150,
                   .s = 70,
                   .d = 40,
                   .dv = 24,
                   .scale = 0.2,
                   .cores = 4},
                  GetParam(), tol());
}

TEST_P(Attention, BiasWithFullyMaskedRows) {
  check_attention({.batches = 4,
                   .l = 9,
                   .s = 20,
                   .d = 16,
                   .dv = 16,
                   .bias = true,
                   .scale = 0.25},
                  GetParam(), tol());
}

TEST_P(Attention, KeysTooLongToStayGoThroughInBlocks) {
  // 6000 keys of head dim 64 do not fit next to their transpose and values:
  // the softmax runs online over key blocks (a ragged last one), with a
  // bias whose first rows mask everything or all but key 0.
  check_attention({.batches = 2,
                   .l = 40,
                   .s = 6000,
                   .d = 64,
                   .dv = 64,
                   .bias = true,
                   .scale = 0.125},
                  GetParam(), tol());
}

TEST_P(Attention, CausalInOneBlockAndOverKeyBlocks) {
  // Resident keys (the diagonal inside the one block; more queries than
  // keys) and, on a 128 KiB scratchpad, 300 keys in blocks (blocks past a
  // row block's last query skipped).
  check_attention({.batches = 3,
                   .l = 100,
                   .s = 70,
                   .d = 32,
                   .dv = 32,
                   .causal = true,
                   .scale = 0.2},
                  GetParam(), tol());
  check_attention({.batches = 2,
                   .l = 300,
                   .s = 300,
                   .d = 64,
                   .dv = 64,
                   .bias = true,
                   .causal = true,
                   .scale = 0.125,
                   .scratchpad = 128 * 1024},
                  GetParam(), tol());
}

TEST_P(Attention, OneBiasRowForEveryQueryAndSharedKeys) {
  // A padding mask (one row repeated) and grouped-query heads reading the
  // same keys and values (stride-0 batches).
  check_attention({.batches = 4,
                   .l = 7,
                   .s = 33,
                   .d = 64,
                   .dv = 64,
                   .bias = true,
                   .bias_rows_repeat = true,
                   .shared_keys = true,
                   .scale = 0.125},
                  GetParam(), tol());
}

TEST_P(Attention, PagedKeysAndValuesReadThroughKeyRows) {
  // Keys and values gathered from tables by their rows: resident, shared by
  // grouped heads, with a bias, and (a 128 KiB scratchpad) over key blocks
  // with a causal diagonal.
  check_attention({.batches = 4,
                   .l = 5,
                   .s = 37,
                   .d = 64,
                   .dv = 64,
                   .shared_keys = true,
                   .paged = true,
                   .scale = 0.125},
                  GetParam(), tol());
  check_attention({.batches = 3,
                   .l = 9,
                   .s = 20,
                   .d = 16,
                   .dv = 24,
                   .bias = true,
                   .paged = true,
                   .scale = 0.25},
                  GetParam(), tol());
  check_attention({.batches = 2,
                   .l = 300,
                   .s = 300,
                   .d = 160,
                   .dv = 64,
                   .causal = true,
                   .paged = true,
                   .scale = 0.125,
                   .scratchpad = 128 * 1024},
                  GetParam(), tol());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Attention,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(AttentionErrors, ShapesAndFit) {
  Case c{.batches = 1, .l = 4, .s = 8, .d = 16, .dv = 16};
  AttentionShape s = shape_of(c, DType::kFloat16);
  s.v = batched(9, 16, DType::kFloat16, 1);
  EXPECT_THROW(kernels::build_attention(s, {sim_target()}),
               kernels::KernelBuildError);
  // one stick of keys of head dim 8192 and 32 query rows do not fit
  c = Case{.batches = 1, .l = 40, .s = 64, .d = 8192, .dv = 8192};
  try {
    kernels::build_attention(shape_of(c, DType::kFloat16), {sim_target()});
    FAIL() << "built a program that cannot fit";
  } catch (const kernels::KernelBuildError& e) {
    EXPECT_NE(std::string(e.what()).find("scratchpad"), std::string::npos);
  }
}

}  // namespace
}  // namespace spyre::sim::test
