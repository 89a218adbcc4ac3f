// One source of chip facts: every builder plans for the chip its Target
// names (a device's DeviceProperties::chip) and for nothing else. Programs
// built for a smaller chip (8 cores, 1 MiB of scratchpad) stay inside it,
// load on a device of that chip, and compute the same bytes as programs
// built for the full chip. A builder that kept its own figure (32 cores,
// 2 MiB) would plan past the small chip and fail here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <variant>

#include "kernel_library_util.h"
#include "spyre/kernels/elementwise.h"
#include "spyre/kernels/gather.h"
#include "spyre/kernels/matmul.h"
#include "spyre/kernels/mlp.h"
#include "spyre/kernels/norm.h"
#include "spyre/kernels/reduce.h"
#include "spyre/kernels/relayout.h"
#include "spyre/kernels/softmax.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using kernels::Target;
using rt::DType;

rt::ChipFigures small_chip() {
  rt::ChipFigures chip = kSpyreChip;
  chip.num_cores = 8;
  chip.scratchpad_bytes = 1u << 20;
  return chip;
}

// Every core of `program` is one of the chip's and within its scratchpad.
void expect_inside(const rt::Program& program, const rt::ChipFigures& chip) {
  ASSERT_FALSE(program.cores.empty());
  for (const rt::CoreProgram& core : program.cores) {
    EXPECT_LT(core.core, chip.num_cores) << program.name;
    EXPECT_LE(core.scratchpad_bytes, chip.scratchpad_budget()) << program.name;
  }
}

// No two cores store to the same device bytes (each output stick has one
// writer): the property that lets cores run in any order.
void expect_disjoint_stores(const rt::Program& program) {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> writer;  // (slot, byte)
  for (const rt::CoreProgram& core : program.cores) {
    for (const rt::Instruction& inst : core.instructions) {
      const auto* store = std::get_if<rt::DmaStore>(&inst);
      if (store == nullptr) continue;
      const rt::StickTransfer& x = store->xfer;
      for (uint32_t i2 = 0; i2 < x.count2; ++i2) {
        for (uint32_t i1 = 0; i1 < x.count1; ++i1) {
          const int64_t start = static_cast<int64_t>(x.dram.offset) +
                                int64_t{i2} * x.dram_stride2 +
                                int64_t{i1} * x.dram_stride1;
          for (uint32_t b = 0; b < x.run_bytes; b += rt::kStickBytes) {
            const auto key =
                std::make_pair(x.dram.slot, static_cast<uint64_t>(start + b));
            const auto [it, fresh] = writer.emplace(key, core.core);
            ASSERT_TRUE(fresh || it->second == core.core)
                << program.name << ": cores " << it->second << " and "
                << core.core << " both store slot " << key.first << " byte "
                << key.second;
          }
        }
      }
    }
  }
}

// Builds one kernel for the full and the small chip, runs each on a device
// of its chip from the same inputs, and compares every slot's bytes.
// `summed`: the last slot is a sum whose order the plan chooses (a product's
// K tiles); its values may differ by a rounding, its other bytes not.
void check_kind(const char* what,
                const std::function<rt::Program(const Target&)>& build,
                const std::function<std::vector<Image>()>& inputs,
                const std::optional<Matrix>& summed = std::nullopt) {
  SCOPED_TRACE(what);
  const rt::ChipFigures small = small_chip();
  const rt::Program full_program = build(Target{kSpyreChip});
  const rt::Program small_program = build(Target{small});
  expect_inside(small_program, small);
  expect_disjoint_stores(full_program);
  expect_disjoint_stores(small_program);
  // Planned for all the cores each chip has (the kernels are large enough).
  EXPECT_GT(full_program.cores.size(), small.num_cores) << what;
  EXPECT_LE(small_program.cores.size(), small.num_cores) << what;

  auto full_device = make_sim_device(0, 1ull << 30);
  auto small_device = make_sim_device(0, 1ull << 30, small);
  std::vector<Image> full_images = inputs(), small_images = inputs();
  run_images(*full_device, full_program, full_images);
  run_images(*small_device, small_program, small_images);
  ASSERT_EQ(full_images.size(), small_images.size());
  const size_t exact = full_images.size() - (summed ? 1 : 0);
  for (size_t i = 0; i < exact; ++i) {
    EXPECT_EQ(full_images[i].bytes, small_images[i].bytes)
        << what << ": slot " << i;
  }
  if (summed) {
    const double tolerance = 2 * unit_roundoff(summed->dtype);
    for (uint64_t r = 0; r < summed->rows; ++r) {
      for (uint64_t c = 0; c < summed->cols; ++c) {
        const double want = full_images.back().get(*summed, 0, r, c);
        const double got = small_images.back().get(*summed, 0, r, c);
        ASSERT_LE(std::abs(got - want),
                  tolerance * std::max(1.0, std::abs(want)))
            << what << " at (" << r << ", " << c << ")";
      }
    }
  }
  // The full chip's program does not fit the small device: the runtime
  // checks programs against the device's own figures too.
  EXPECT_THROW(rt::LoadedProgram(*small_device, full_program), rt::Error);
}

std::vector<Image> random_images(std::initializer_list<Matrix> inputs,
                                 std::initializer_list<Matrix> outputs) {
  std::mt19937 rng(3);
  std::vector<Image> images;
  for (const Matrix& m : inputs) {
    images.emplace_back(m.bytes());
    images.back().fill(m, rng);
  }
  for (const Matrix& m : outputs) images.emplace_back(m.bytes());
  return images;
}

TEST(KernelTarget, EveryBuilderPlansForTheChipItIsGiven) {
  const DType t = DType::kFloat16;
  // Large enough that the full chip's plans use more than 8 cores.
  const Matrix x = Matrix::stick_columns(1024, 1024, t);
  const Matrix y = Matrix::stick_columns(1024, 1024, t);

  check_kind(
      "softmax",
      [&](const Target& target) {
        kernels::SoftmaxOptions o;
        o.target = target;
        return kernels::build_softmax(x, y, o);
      },
      [&] { return random_images({x}, {y}); });

  const Matrix sums = Matrix::stick_columns(1, 1024, DType::kFloat32);
  check_kind(
      "reduce",
      [&](const Target& target) {
        kernels::ReduceOptions o;
        o.target = target;
        return kernels::build_reduce_along_sticks(x, sums,
                                                  kernels::ReduceOp::kSum, o);
      },
      [&] { return random_images({x}, {sums}); });

  check_kind(
      "layer norm",
      [&](const Target& target) {
        kernels::NormShape s{
            x, y, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
        kernels::NormOptions o;
        o.target = target;
        return kernels::build_norm(s, o);
      },
      [&] { return random_images({x}, {y}); });

  const Matrix a = Matrix::stick_columns(1024, 64, t);
  const Matrix w = Matrix::stick_columns(64, 512, t);
  const Matrix c = Matrix::stick_columns(1024, 512, t);
  check_kind(
      "matmul",
      [&](const Target& target) {
        kernels::MatmulShape s{a, w, c};
        kernels::MatmulOptions o;
        o.target = target;
        return kernels::build_matmul(s, kernels::plan_matmul(s, o), o);
      },
      [&] {
        return random_images({a, w}, {c});
      },
      c);

  check_kind(
      "restickify",
      [&](const Target& target) {
        kernels::RelayoutOptions o;
        o.target = target;
        return kernels::build_restickify(
            x, Matrix::stick_columns(1024, 1024, t), o);
      },
      [&] {
        return random_images({x}, {Matrix::stick_columns(1024, 1024, t)});
      });

  check_kind(
      "elementwise",
      [&](const Target& target) {
        kernels::ElementwiseKernel k;
        k.target = target;
        k.shape = {1024, 1024};
        kernels::StickOperand in;
        // x's rows: 1024 fp16 elements are 16 sticks, one after another.
        in.strides = {16 * int64_t{rt::kStickBytes}};
        in.stick_stride = rt::kStickBytes;
        k.inputs = {in};
        k.output = in;
        k.steps = {kernels::unary_step(rt::VecOp::kExp, 0, DType::kFloat32)};
        return kernels::build_elementwise(k);
      },
      [&] { return random_images({x}, {y}); });
}

TEST(KernelTarget, NoChipIsABuildErrorThatSaysWhatToDo) {
  const Matrix x = Matrix::stick_columns(64, 64, DType::kFloat16);
  try {
    kernels::build_softmax(x, x, {});
    FAIL() << "a program was built without a target chip";
  } catch (const kernels::KernelBuildError& e) {
    EXPECT_NE(std::string(e.what()).find("DeviceProperties::chip"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace spyre::sim::test
