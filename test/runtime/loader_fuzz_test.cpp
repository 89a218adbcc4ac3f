// Seeded fuzzing of the whole loader (deserialize -> validate -> plan -> load
// -> bind/relocate/verify -> execute) against the rules in
// fuzz/loader_harness.h. Two mutators: bytes of the committed corpus
// (test/data/program_corpus/, what a corrupted file looks like) and fields of
// the sample programs (what a buggy compiler emits: every field of every
// instruction, slot and core pushed to boundary values, instructions
// dropped, duplicated and moved), which reaches validate() far more often
// than byte noise that the checksum and length checks stop first.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "fuzz/loader_harness.h"
#include "program_samples.h"

namespace spyre::rt {
namespace {

using testing::check_program;
using testing::check_serialized;
using testing::LoaderOutcome;
using testing::LoaderViolation;
using Rng = std::mt19937_64;

size_t below(Rng& rng, size_t n) {
  return static_cast<size_t>(rng() % std::max<size_t>(n, 1));
}

// A value a field is likely to break on: zero, one, stick boundaries, the
// scratchpad's edges, sign flips, the type's extremes, or noise.
template <typename T>
T boundary_value(T current, Rng& rng) {
  using Limits = std::numeric_limits<T>;
  // Unsigned arithmetic wraps instead of overflowing; the cast back to T is
  // modular (C++20).
  const uint64_t c = static_cast<uint64_t>(current);
  const uint64_t candidates[] = {0,
                                 1,
                                 127,
                                 128,
                                 256,
                                 c + 128,
                                 c - 128,
                                 c + 1,
                                 2 * c,
                                 0 - c,
                                 0 - uint64_t{128},
                                 (1u << 21) - 128,
                                 1u << 21,
                                 (1u << 21) + 128,
                                 below(rng, 64) * 128,
                                 rng()};
  const size_t pick = below(rng, std::size(candidates) + 2);
  if (pick == std::size(candidates)) return Limits::max();
  if (pick == std::size(candidates) + 1) return Limits::min();
  return static_cast<T>(candidates[pick]);
}

// Collects one "poke" per mutable field of a program part, then applies one.
class FieldMutator {
 public:
  explicit FieldMutator(Rng& rng) : rng_(rng) {}

  template <typename T>
  requires std::is_integral_v<T>
  void field(T& v) {
    pokes_.push_back([this, &v] { v = boundary_value(v, rng_); });
  }
  void field(bool& v) {
    pokes_.push_back([&v] { v = !v; });
  }
  void field(double& v) {
    pokes_.push_back([this, &v] {
      const double values[] = {0.0, -1.0, 1e300,
                               std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity()};
      v = values[below(rng_, std::size(values))];
    });
  }
  // One past the last valid value is included, so validate() sees bad enums.
  template <typename E>
  requires std::is_enum_v<E>
  void enum_field(E& e, int count) {
    pokes_.push_back([this, &e, count] {
      e = static_cast<E>(below(rng_, static_cast<size_t>(count) + 1));
    });
  }
  void field(DType& t) { enum_field(t, kNumDTypes); }
  void field(VecOp& op) { enum_field(op, kNumVecOps); }
  void field(RedOp& op) { enum_field(op, kNumRedOps); }
  void field(RandDist& d) { enum_field(d, 2); }
  void field(SymAddr& a) {
    field(a.slot);
    field(a.offset);
  }
  void field(Tile& t) {
    field(t.offset);
    field(t.dtype);
    field(t.row_stride);
    field(t.col_stride);
  }
  void field(StickTransfer& x) {
    field(x.dram);
    field(x.spad);
    field(x.run_bytes);
    field(x.count1);
    field(x.count2);
    field(x.dram_stride1);
    field(x.dram_stride2);
    field(x.spad_stride1);
    field(x.spad_stride2);
    field(x.share_group);
  }
  void field(DmaLoad& i) { field(i.xfer); }
  void field(DmaStore& i) { fields(i.xfer, i.mask_begin, i.mask_end); }
  void field(IndexedRows& g) {
    fields(g.table, g.table_rows, g.table_row_stride, g.row_bytes, g.index_spad,
           g.index_dtype, g.count, g.spad, g.spad_stride);
  }
  void field(RingSend& s) { fields(s.channel, s.dst_core, s.spad, s.bytes); }
  void field(RingRecv& r) {
    fields(r.channel, r.src_core, r.spad, r.bytes, r.transpose.dtype,
           r.transpose.cols, r.transpose.pitch);
  }
  void field(MatMul& m) { fields(m.a, m.b, m.c, m.m, m.n, m.k, m.accumulate); }
  void field(Vector& v) {
    fields(v.op, v.dst, v.src0, v.src1, v.src2, v.rows, v.cols, v.src1_is_imm,
           v.imm, v.imm2);
  }
  void field(Reduce& r) {
    fields(r.op, r.dst, r.src, r.rows, r.cols, r.accumulate, r.index_base);
  }
  void field(RandFill& f) {
    fields(f.dst, f.rows, f.cols, f.dist, f.seed, f.offset, f.a, f.b);
  }
  void field(Instruction& inst) {
    std::visit([this](auto& i) { field(i); }, inst);
  }
  void field(ArgSlot& a) {
    fields(a.dtype, a.bytes, a.is_output);
    for (int64_t& d : a.layout.device_size) field(d);
  }
  void field(CoreProgram& c) { fields(c.core, c.scratchpad_bytes); }

  template <typename... Ts>
  void fields(Ts&... vs) {
    (field(vs), ...);
  }

  bool empty() const { return pokes_.empty(); }
  void apply_one() { pokes_[below(rng_, pokes_.size())](); }

 private:
  Rng& rng_;
  std::vector<std::function<void()>> pokes_;
};

// One structural or field edit of `p`.
void mutate(Program& p, Rng& rng) {
  auto& cores = p.cores;
  auto random_core = [&]() -> CoreProgram* {
    return cores.empty() ? nullptr : &cores[below(rng, cores.size())];
  };
  CoreProgram* core = random_core();
  auto& insts = core ? core->instructions : cores.emplace_back().instructions;
  switch (below(rng, 10)) {
    case 0:  // drop an instruction
      if (!insts.empty()) insts.erase(insts.begin() + below(rng, insts.size()));
      return;
    case 1:  // duplicate one in place (a second ring end, a second member)
      if (!insts.empty()) {
        size_t at = below(rng, insts.size());
        insts.insert(insts.begin() + at, insts[at]);
      }
      return;
    case 2:  // move one to another core
      if (!insts.empty()) {
        size_t at = below(rng, insts.size());
        Instruction moved = insts[at];
        insts.erase(insts.begin() + at);
        random_core()->instructions.push_back(moved);
      }
      return;
    case 3:  // drop an argument slot: every later slot index shifts
      if (!p.args.empty())
        p.args.erase(p.args.begin() + below(rng, p.args.size()));
      return;
    case 4:  // resize a constant
      if (!p.constants.empty()) {
        auto& data = p.constants[below(rng, p.constants.size())].data;
        const size_t smaller = data.size() >= 128 ? data.size() - 128 : 0;
        const size_t sizes[] = {0, 1, smaller, data.size() + 128,
                                data.size() + 1};
        data.resize(sizes[below(rng, std::size(sizes))]);
      }
      return;
    case 5: {  // an argument slot's dtype, bytes, flag or layout
      if (p.args.empty()) return;
      FieldMutator m(rng);
      m.field(p.args[below(rng, p.args.size())]);
      if (!m.empty()) m.apply_one();
      return;
    }
    case 6: {  // a core's id or footprint
      FieldMutator m(rng);
      m.field(*random_core());
      m.apply_one();
      return;
    }
    default: {  // a field of an instruction
      if (insts.empty()) return;
      FieldMutator m(rng);
      m.field(insts[below(rng, insts.size())]);
      m.apply_one();
      return;
    }
  }
}

struct Tally {
  int rejected = 0, planned = 0, launched = 0;
  void add(LoaderOutcome outcome) {
    if (outcome == LoaderOutcome::kRejected) ++rejected;
    if (outcome == LoaderOutcome::kPlannedOnly) ++planned;
    if (outcome == LoaderOutcome::kLaunched) ++launched;
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Runs `check` and turns a broken rule (or any stray exception) into a test
// failure naming the iteration, so the seed reproduces it.
template <typename F>
bool holds(int iteration, F&& check, Tally& tally) {
  try {
    tally.add(check());
    return true;
  } catch (const LoaderViolation& v) {
    ADD_FAILURE() << "iteration " << iteration << ": " << v.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "iteration " << iteration << ": unexpected exception "
                  << e.what();
  }
  return false;
}

TEST(LoaderFuzz, SamplesAndCorpusHoldTheContract) {
  for (const auto& [name, program] : testing::corpus_programs()) {
    EXPECT_EQ(check_program(program), LoaderOutcome::kLaunched) << name;
    EXPECT_EQ(check_serialized(serialize(program)), LoaderOutcome::kLaunched)
        << name;
  }
}

TEST(LoaderFuzz, FieldMutationsOfSamplePrograms) {
  const auto seeds = testing::corpus_programs();
  Rng rng(0x5eed'f1e1d);
  constexpr int kIterations = 20000;
  Tally tally;
  const auto start = std::chrono::steady_clock::now();
  for (int iter = 0; iter < kIterations; ++iter) {
    Program p = seeds[below(rng, seeds.size())].second;
    const int edits = 1 + static_cast<int>(below(rng, 3));
    for (int e = 0; e < edits; ++e) mutate(p, rng);
    if (!holds(
            iter, [&] { return check_program(p); }, tally))
      break;
  }
  // Printed, not asserted: tests are not timed (sanitizer builds on a
  // loaded 2-core machine run this 10x slower than a release build).
  const double seconds = seconds_since(start);
  std::cout << "[ fuzz     ] " << kIterations << " field mutations in "
            << seconds << " s: " << tally.rejected << " rejected, "
            << tally.launched << " loaded and run, " << tally.planned
            << " planned only\n";
  // Both sides of validate() must be exercised for the test to mean much.
  EXPECT_GT(tally.rejected, kIterations / 4);
  EXPECT_GT(tally.launched, kIterations / 20);
}

std::vector<std::vector<uint8_t>> read_corpus() {
  std::vector<std::vector<uint8_t>> corpus;
  const auto dir =
      std::filesystem::path(SPYRE_TEST_DATA_DIR) / "program_corpus";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in),
                        std::istreambuf_iterator<char>());
  }
  return corpus;
}

// Byte mutations of the corpus files, resealed so most reach the parser;
// whatever parses is loaded and run.
TEST(LoaderFuzz, ByteMutationsOfTheCorpusThroughTheLoader) {
  const auto corpus = read_corpus();
  ASSERT_GE(corpus.size(), 3u);
  Rng rng(0xb17e5);
  constexpr int kIterations = 20000;
  Tally tally;
  const auto start = std::chrono::steady_clock::now();
  for (int iter = 0; iter < kIterations; ++iter) {
    std::vector<uint8_t> bytes = corpus[below(rng, corpus.size())];
    const int edits = 1 + static_cast<int>(below(rng, 3));
    for (int e = 0; e < edits && bytes.size() > 16; ++e) {
      // Past the header, before the checksum: the program body.
      const size_t at = 12 + below(rng, bytes.size() - 16);
      switch (below(rng, 4)) {
        case 0:
          bytes[at] ^= static_cast<uint8_t>(1u << below(rng, 8));
          break;
        case 1:
          bytes[at] = static_cast<uint8_t>(rng());
          break;
        case 2:
          bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(at));
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(at),
                       static_cast<uint8_t>(rng()));
          break;
      }
    }
    testing::reseal(bytes);
    if (!holds(
            iter, [&] { return check_serialized(bytes); }, tally))
      break;
  }
  const double seconds = seconds_since(start);
  std::cout << "[ fuzz     ] " << kIterations << " byte mutations in "
            << seconds << " s: " << tally.rejected << " rejected, "
            << tally.launched << " loaded and run, " << tally.planned
            << " planned only\n";
  EXPECT_GT(tally.rejected, 0);
  EXPECT_GT(tally.launched, 0);
}

}  // namespace
}  // namespace spyre::rt
