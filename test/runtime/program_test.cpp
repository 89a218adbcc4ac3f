// Program introspection and validation: names, arities, exact extents and
// scratchpad ranges, and every validation rule violated once.
#include "spyre/runtime/program.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "fake_device.h"
#include "program_samples.h"
#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

using testing::sample_program;
using testing::tile;
using testing::transfer;

TEST(ProgramNames, EveryInstructionTypeHasItsName) {
  EXPECT_STREQ(instruction_name(DmaLoad{}), "DmaLoad");
  EXPECT_STREQ(instruction_name(DmaStore{}), "DmaStore");
  EXPECT_STREQ(instruction_name(DmaGather{}), "DmaGather");
  EXPECT_STREQ(instruction_name(RingSend{}), "RingSend");
  EXPECT_STREQ(instruction_name(RingRecv{}), "RingRecv");
  EXPECT_STREQ(instruction_name(MatMul{}), "MatMul");
  EXPECT_STREQ(instruction_name(Vector{}), "Vector");
  EXPECT_STREQ(instruction_name(Reduce{}), "Reduce");
  EXPECT_STREQ(instruction_name(RandFill{}), "RandFill");
}

TEST(ProgramNames, VecOpArityAndCompare) {
  int counts[4] = {0, 0, 0, 0};
  int compares = 0, bitwise = 0;
  for (int i = 0; i < kNumVecOps; ++i) {
    auto op = static_cast<VecOp>(i);
    ++counts[vec_op_arity(op)];
    compares += vec_op_is_compare(op) ? 1 : 0;
    bitwise += vec_op_is_bitwise(op) ? 1 : 0;
  }
  EXPECT_EQ(counts[0], 2);   // fill, iota
  EXPECT_EQ(counts[1], 20);  // copy .. bit_not
  EXPECT_EQ(counts[2], 19);  // add .. bit_xor
  EXPECT_EQ(counts[3], 1);   // select
  EXPECT_EQ(compares, 6);
  EXPECT_EQ(bitwise, 4);
  EXPECT_EQ(vec_op_arity(VecOp::kBitNot), 1);
  EXPECT_EQ(vec_op_arity(VecOp::kBitXor), 2);
  EXPECT_EQ(vec_op_arity(VecOp::kFloor), 1);
  EXPECT_EQ(vec_op_arity(VecOp::kAdd), 2);
  EXPECT_EQ(vec_op_arity(VecOp::kRemainder), 2);
  EXPECT_TRUE(vec_op_is_compare(VecOp::kEq));
  EXPECT_TRUE(vec_op_is_compare(VecOp::kGe));
  EXPECT_FALSE(vec_op_is_compare(VecOp::kLogicalAnd));
}

TEST(DeviceExtents, TransferWithPositiveAndNegativeStrides) {
  StickTransfer x = transfer(2, 4096, 0, 256, 3, 512);
  x.count2 = 2;
  x.dram_stride2 = -2048;
  auto extents = device_extents(DmaLoad{x});
  ASSERT_EQ(extents.size(), 1u);
  EXPECT_EQ(extents[0].slot, 2u);
  EXPECT_EQ(extents[0].lo, 4096 - 2048);
  EXPECT_EQ(extents[0].hi, 4096 + 2 * 512 + 256);
  auto store = device_extents(DmaStore{x});
  ASSERT_EQ(store.size(), 1u);
  EXPECT_EQ(store[0].lo, extents[0].lo);
  EXPECT_EQ(store[0].hi, extents[0].hi);
}

TEST(DeviceExtents, GatherCoversTheWholeTable) {
  DmaGather g;
  g.table = {1, 256};
  g.table_rows = 10;
  g.table_row_stride = 384;
  g.row_bytes = 256;
  g.count = 2;
  auto extents = device_extents(g);
  ASSERT_EQ(extents.size(), 1u);
  EXPECT_EQ(extents[0].slot, 1u);
  EXPECT_EQ(extents[0].lo, 256);
  EXPECT_EQ(extents[0].hi, 256 + 9 * 384 + 256);
}

TEST(DeviceExtents, ComputeHasNone) {
  EXPECT_TRUE(device_extents(MatMul{}).empty());
  EXPECT_TRUE(device_extents(Vector{}).empty());
  EXPECT_TRUE(device_extents(RingSend{}).empty());
}

TEST(ScratchpadRanges, TileWithNegativeAndZeroStrides) {
  RandFill f;
  f.dst = tile(1000, DType::kFloat32, -100, 0);
  f.rows = 3;
  f.cols = 50;
  auto ranges = scratchpad_ranges(f);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].lo, 800);
  EXPECT_EQ(ranges[0].hi, 1004);
  EXPECT_TRUE(ranges[0].write);
}

TEST(ScratchpadRanges, MatMulReadsCWhenAccumulating) {
  MatMul mm{tile(0, DType::kBFloat16, 16, 2),
            tile(1024, DType::kBFloat16, 8, 2),
            tile(4096, DType::kFloat32, 16, 4),
            4,
            4,
            8,
            false};
  auto plain = scratchpad_ranges(mm);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0].lo, 0);  // a: 4 x 8
  EXPECT_EQ(plain[0].hi, 3 * 16 + 7 * 2 + 2);
  EXPECT_EQ(plain[1].lo, 1024);  // b: 8 x 4
  EXPECT_EQ(plain[1].hi, 1024 + 7 * 8 + 3 * 2 + 2);
  EXPECT_EQ(plain[2].lo, 4096);  // c: 4 x 4
  EXPECT_EQ(plain[2].hi, 4096 + 3 * 16 + 3 * 4 + 4);
  EXPECT_FALSE(plain[0].write);
  EXPECT_FALSE(plain[1].write);
  EXPECT_TRUE(plain[2].write);
  mm.accumulate = true;
  auto acc = scratchpad_ranges(mm);
  ASSERT_EQ(acc.size(), 4u);
  EXPECT_FALSE(acc[2].write);
  EXPECT_EQ(acc[2].lo, 4096);
  EXPECT_TRUE(acc[3].write);
}

TEST(ScratchpadRanges, VectorOperandsFollowArity) {
  Vector v;
  v.op = VecOp::kMul;
  v.rows = 2;
  v.cols = 4;
  v.dst = tile(0, DType::kFloat32, 16, 4);
  v.src0 = tile(128, DType::kFloat32, 16, 4);
  v.src1 = tile(256, DType::kFloat32, 16, 4);
  EXPECT_EQ(scratchpad_ranges(v).size(), 3u);
  v.src1_is_imm = true;
  auto imm = scratchpad_ranges(v);
  ASSERT_EQ(imm.size(), 2u);
  EXPECT_EQ(imm[0].lo, 128);
  EXPECT_TRUE(imm[1].write);
  v.op = VecOp::kSelect;
  EXPECT_EQ(scratchpad_ranges(v).size(), 4u);  // imm flag ignored by select
  v.op = VecOp::kFill;
  auto fill = scratchpad_ranges(v);
  ASSERT_EQ(fill.size(), 1u);
  EXPECT_EQ(fill[0].lo, 0);
  EXPECT_EQ(fill[0].hi, 16 + 12 + 4);
}

TEST(ScratchpadRanges, ReduceDmaRingAndGather) {
  Reduce r;
  r.src = tile(0, DType::kFloat16, 64, 2);
  r.dst = tile(512, DType::kFloat32, 4, 0);
  r.rows = 3;
  r.cols = 32;
  auto red = scratchpad_ranges(r);
  ASSERT_EQ(red.size(), 2u);
  EXPECT_EQ(red[0].hi, 2 * 64 + 31 * 2 + 2);
  EXPECT_EQ(red[1].lo, 512);
  EXPECT_EQ(red[1].hi, 512 + 2 * 4 + 4);

  StickTransfer x = transfer(0, 0, 1024, 128, 2, 128, 256);
  x.count2 = 3;
  x.spad_stride2 = 1024;
  auto load = scratchpad_ranges(DmaLoad{x});
  ASSERT_EQ(load.size(), 1u);
  EXPECT_EQ(load[0].lo, 1024);
  EXPECT_EQ(load[0].hi, 1024 + 256 + 2 * 1024 + 128);
  EXPECT_TRUE(load[0].write);
  EXPECT_FALSE(scratchpad_ranges(DmaStore{x})[0].write);

  EXPECT_TRUE(scratchpad_ranges(RingSend{0, 1, 0, 0}).empty());
  auto recv = scratchpad_ranges(RingRecv{0, 1, 256, 384, {}});
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].lo, 256);
  EXPECT_EQ(recv[0].hi, 640);
  EXPECT_TRUE(recv[0].write);
  // Three fp32 sticks landed transposed: 20 rows of 3 elements, 256 apart.
  auto landed = scratchpad_ranges(
      RingRecv{0, 1, 256, 384, StickTranspose{DType::kFloat32, 20, 256}});
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].lo, 256);
  EXPECT_EQ(landed[0].hi, 256 + 19 * 256 + 3 * 4);
  EXPECT_TRUE(landed[0].write);

  DmaGather g;
  g.index_spad = 8;
  g.index_dtype = DType::kInt32;
  g.count = 5;
  g.spad = 1024;
  g.spad_stride = 256;
  g.row_bytes = 128;
  auto gather = scratchpad_ranges(g);
  ASSERT_EQ(gather.size(), 2u);
  EXPECT_EQ(gather[0].lo, 8);
  EXPECT_EQ(gather[0].hi, 8 + 5 * 4);
  EXPECT_FALSE(gather[0].write);
  EXPECT_EQ(gather[1].lo, 1024);
  EXPECT_EQ(gather[1].hi, 1024 + 4 * 256 + 128);
  EXPECT_TRUE(gather[1].write);
}

TEST(Validate, SamplesAreValid) {
  for (const auto& [name, program] : testing::corpus_programs()) {
    EXPECT_NO_THROW(validate(program, testing::test_limits())) << name;
  }
}

TEST(Validate, MessageNamesProgramCoreInstructionAndField) {
  Program p = sample_program();
  std::get<MatMul>(p.cores[0].instructions[3]).c.offset = 65536 - 1024;
  try {
    validate(p, testing::test_limits());
    FAIL() << "expected kMalformedProgram";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram);
    EXPECT_EQ(std::string(e.what()),
              "program 'sample': core 0, instruction 3 (MatMul): scratchpad "
              "range [64512, 68608) exceeds the core's footprint of 65536 "
              "bytes");
  }
}

struct Violation {
  const char* name;
  std::function<void(Program&)> mutate;
  const char* fragment;
};

template <typename T>
T& inst(Program& p, size_t core, size_t index) {
  return std::get<T>(p.cores[core].instructions[index]);
}

// Core 0, instruction 0 of the sample loads x; 10 gathers; 11 stores y;
// 12 sends on channel 7; core 1 instruction 1 receives it.
std::vector<Violation> violations() {
  return {
      {"slot out of range",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.dram.slot = 4; },
       "dram.slot 4 is out of range"},
      {"misaligned dram offset",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.dram.offset = 64; },
       "dram.offset = 64 is not a multiple of 128"},
      {"misaligned spad",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.spad = 8; },
       "spad = 8 is not a multiple of 128"},
      {"misaligned dram stride",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.dram_stride1 = 100; },
       "dram_stride1 = 100"},
      {"misaligned spad stride",
       [](Program& p) { inst<DmaStore>(p, 0, 11).xfer.spad_stride2 = 1; },
       "spad_stride2 = 1"},
      {"misaligned run",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.run_bytes = 192; },
       "run_bytes = 192"},
      {"zero run",
       [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.run_bytes = 0; },
       "run_bytes must be nonzero"},
      {"zero count", [](Program& p) { inst<DmaLoad>(p, 0, 0).xfer.count2 = 0; },
       "count2 must be nonzero"},
      {"scratchpad overflow",
       [](Program& p) { inst<DmaLoad>(p, 1, 0).xfer.spad = 8192 - 128; },
       "core 1, instruction 0 (DmaLoad): scratchpad range [8064, 12160) "
       "exceeds the core's footprint of 8192 bytes"},
      {"footprint above the device",
       [](Program& p) { p.cores[1].scratchpad_bytes = (2u << 20) + 128; },
       "core 1 declares a scratchpad footprint of 2097280 bytes"},
      {"core id out of range", [](Program& p) { p.cores[1].core = 32; },
       "core 1 runs on core id 32 but the device has 32 cores"},
      {"duplicate core id", [](Program& p) { p.cores[1].core = 0; },
       "core 1 uses core id 0 which an earlier core program already uses"},
      {"invalid arg dtype",
       [](Program& p) { p.args[1].dtype = static_cast<DType>(9); },
       "argument slot 1 'w' has invalid dtype 9"},
      {"invalid tile dtype",
       [](Program& p) {
         inst<RandFill>(p, 0, 8).dst.dtype = static_cast<DType>(200);
       },
       "instruction 8 (RandFill): dst.dtype 200 is not a valid dtype"},
      {"matmul a/b dtypes differ",
       [](Program& p) { inst<MatMul>(p, 0, 3).b.dtype = DType::kBFloat16; },
       "a.dtype float16 differs from b.dtype bfloat16"},
      {"matmul c not fp32",
       [](Program& p) { inst<MatMul>(p, 0, 3).c.dtype = DType::kFloat16; },
       "cannot multiply float16 into c.dtype float16"},
      {"int8 matmul into fp32",
       [](Program& p) {
         auto& mm = inst<MatMul>(p, 0, 3);
         mm.a.dtype = mm.b.dtype = DType::kInt8;
       },
       "cannot multiply int8 into c.dtype float32"},
      {"zero matmul k", [](Program& p) { inst<MatMul>(p, 0, 3).k = 0; },
       "k must be nonzero"},
      {"invalid dtype in an unused operand",
       [](Program& p) {
         inst<Vector>(p, 0, 9).src2.dtype = static_cast<DType>(9);
       },
       "instruction 9 (Vector): src2.dtype 9 is not a valid dtype"},
      {"zero vector rows", [](Program& p) { inst<Vector>(p, 0, 4).rows = 0; },
       "instruction 4 (Vector): rows must be nonzero"},
      {"compare into float",
       [](Program& p) { inst<Vector>(p, 0, 5).dst.dtype = DType::kFloat32; },
       "dst.dtype float32 must be bool for a comparison"},
      {"bitwise op on floats",
       [](Program& p) { inst<Vector>(p, 0, 4).op = VecOp::kBitAnd; },
       "a bitwise op takes integer or bool tiles only"},
      {"invalid vec op",
       [](Program& p) { inst<Vector>(p, 0, 4).op = static_cast<VecOp>(77); },
       "op 77 is not a valid VecOp"},
      {"argmax into int32",
       [](Program& p) { inst<Reduce>(p, 0, 7).dst.dtype = DType::kInt32; },
       "dst.dtype int32 must be int64 for an arg reduction"},
      {"accumulating argmax",
       [](Program& p) { inst<Reduce>(p, 0, 7).accumulate = true; },
       "accumulate is not valid for arg reductions"},
      {"invalid red op",
       [](Program& p) { inst<Reduce>(p, 0, 7).op = static_cast<RedOp>(6); },
       "op 6 is not a valid RedOp"},
      {"invalid distribution",
       [](Program& p) {
         inst<RandFill>(p, 0, 8).dist = static_cast<RandDist>(2);
       },
       "dist 2 is not a valid RandDist"},
      {"gather index dtype",
       [](Program& p) {
         inst<DmaGather>(p, 0, 10).index_dtype = DType::kFloat32;
       },
       "index_dtype float32 must be int32 or int64"},
      {"gather zero table rows",
       [](Program& p) { inst<DmaGather>(p, 0, 10).table_rows = 0; },
       "table_rows must be nonzero"},
      {"gather table beyond slot",
       [](Program& p) { inst<DmaGather>(p, 0, 10).table_rows = 33; },
       "device range [0, 4224) leaves argument slot 1 'w' of 4096 bytes"},
      {"store beyond slot",
       [](Program& p) { inst<DmaStore>(p, 0, 11).xfer.dram.offset = 256; },
       "device range [256, 8320) leaves argument slot 2 'y' of 8192 bytes"},
      {"negative stride below the slot",
       [](Program& p) { inst<DmaStore>(p, 1, 2).xfer.dram.offset = 0; },
       "device range [-128, 128) leaves argument slot 2 'y'"},
      {"read beyond constant",
       [](Program& p) { inst<DmaLoad>(p, 0, 2).xfer.run_bytes = 384; },
       "leaves constant slot 3 'bias' of 256 bytes"},
      {"constant not whole sticks",
       [](Program& p) { p.constants[0].data.resize(200); },
       "constant 0 'bias' holds 200 bytes"},
      {"empty constant", [](Program& p) { p.constants[0].data.clear(); },
       "constant 0 'bias' holds 0 bytes"},
      {"ring send without receive",
       [](Program& p) { inst<RingRecv>(p, 1, 1).channel = 8; },
       "ring channel 7 has 1 sends and 0 receives"},
      {"ring channel with two sends",
       [](Program& p) {
         p.cores[1].instructions.push_back(RingSend{7, 0, 0, 128});
       },
       "ring channel 7 has 2 sends and 1 receives"},
      {"ring dst_core wrong",
       [](Program& p) { inst<RingSend>(p, 0, 12).dst_core = 6; },
       "dst_core 6 of channel 7 is not core id 5"},
      {"ring src_core wrong",
       [](Program& p) { inst<RingRecv>(p, 1, 1).src_core = 1; },
       "src_core 1 of channel 7 is not core id 0"},
      {"ring bytes differ",
       [](Program& p) { inst<RingRecv>(p, 1, 1).bytes = 2048; },
       "channel 7 receives 2048 bytes but its send carries 4096"},
      {"transposed landing past the scratchpad",
       [](Program& p) { inst<RingRecv>(p, 1, 1).transpose.pitch = 128; },
       "scratchpad range [4096, 12224) exceeds the core's footprint of 8192"},
      {"transpose cols past a stick",
       [](Program& p) { inst<RingRecv>(p, 1, 1).transpose.cols = 65; },
       "transpose.cols 65 exceeds the 64"},
      {"transposed rows overlap",
       [](Program& p) { inst<RingRecv>(p, 1, 1).transpose.pitch = 32; },
       "transpose.pitch 32 is shorter than a landed row (64 bytes)"},
      {"transpose pitch without cols",
       [](Program& p) { inst<RingRecv>(p, 1, 1).transpose.cols = 0; },
       "transpose.pitch 64 without transpose.cols"},
      {"transposed landing misaligned",
       [](Program& p) { inst<RingRecv>(p, 1, 1).spad = 4095; },
       "transposed landing at 4095 with pitch 64 is not aligned"},
      {"transposed receive of part of a stick",
       [](Program& p) {
         inst<RingRecv>(p, 1, 1).bytes = 4000;
         inst<RingSend>(p, 0, 12).bytes = 4000;
       },
       "bytes of a transposed receive = 4000 is not a multiple of 128"},
      {"ring to itself",
       [](Program& p) {
         p.cores[0].instructions.push_back(RingSend{9, 0, 0, 0});
         p.cores[0].instructions.push_back(RingRecv{9, 0, 0, 0, {}});
       },
       "ring channel 9 sends from core id 0 to itself"},
      {"share group reads differ",
       [](Program& p) { inst<DmaLoad>(p, 1, 0).xfer.run_bytes = 2048; },
       "share group 1 member reads different device bytes"},
      {"share group twice on a core",
       [](Program& p) {
         StickTransfer x = inst<DmaLoad>(p, 1, 0).xfer;
         p.cores[1].instructions.push_back(DmaLoad{x});
       },
       "share group 1 has two members on the same core"},
      {"share group on a store",
       [](Program& p) { inst<DmaStore>(p, 0, 11).xfer.share_group = 2; },
       "share_group 2 is only valid on DmaLoad"},
      {"write mask past the run",
       [](Program& p) { inst<DmaStore>(p, 0, 11).mask_end = 129; },
       "write mask [0, 129) is empty or reaches past run_bytes 128"},
      {"empty write mask",
       [](Program& p) {
         inst<DmaStore>(p, 0, 11).mask_begin = 64;
         inst<DmaStore>(p, 0, 11).mask_end = 64;
       },
       "write mask [64, 64) is empty"},
      {"mask_begin without mask_end",
       [](Program& p) { inst<DmaStore>(p, 0, 11).mask_begin = 8; },
       "mask_begin 8 without a mask_end"},
      {"share group of nine",
       [](Program& p) {
         StickTransfer x = inst<DmaLoad>(p, 1, 0).xfer;
         for (uint32_t c = 10; c < 17; ++c) {
           p.cores.push_back(CoreProgram{c, 4096, {DmaLoad{x}}});
         }
       },
       "share group 1 has 9 members; at most 8"},
      {"negative layout dimension",
       [](Program& p) {
         p.args[0].layout.device_size = {-1, 64};
       },
       "argument slot 0 'x' has a negative device dimension -1"},
  };
}

TEST(Validate, EveryRuleViolatedOnce) {
  for (const Violation& v : violations()) {
    Program p = sample_program();
    v.mutate(p);
    try {
      validate(p, testing::test_limits());
      ADD_FAILURE() << v.name << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram) << v.name;
      EXPECT_NE(std::string(e.what()).find(v.fragment), std::string::npos)
          << v.name << ": message was: " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("program 'sample': ", 0), 0u)
          << v.name << ": " << e.what();
    }
  }
}

TEST(Validate, ShareGroupOfEightIsAccepted) {
  Program p = sample_program();
  StickTransfer x = inst<DmaLoad>(p, 1, 0).xfer;
  for (uint32_t c = 10; c < 16; ++c) {
    p.cores.push_back(CoreProgram{c, 4096, {DmaLoad{x}}});
  }
  EXPECT_NO_THROW(validate(p, testing::test_limits()));
}

TEST(Validate, LimitsComeFromTheCaller) {
  Program p = sample_program();
  EXPECT_THROW(validate(p, ProgramLimits{4, 2u << 20, 8}), Error);  // core id 5
  EXPECT_THROW(validate(p, ProgramLimits{32, 32768, 8}), Error);    // footprint
  EXPECT_NO_THROW(validate(p, ProgramLimits{6, 65536, 8}));
}

TEST(Validate, HugeStridesDoNotWrapIntoRange) {
  Program p = sample_program();
  auto& x = inst<DmaLoad>(p, 0, 0).xfer;
  x.count1 = 0xFFFFFFFFu;
  x.dram_stride1 = std::numeric_limits<int64_t>::max() / 128 * 128;
  x.spad_stride1 = 0;
  EXPECT_THROW(validate(p, testing::test_limits()), Error);
  x.dram_stride1 = std::numeric_limits<int64_t>::min();
  EXPECT_THROW(validate(p, testing::test_limits()), Error);
}

TEST(Validate, AnAccessPast63BitOffsetsIsRefusedEvenInAHugeSlot) {
  // Found by the loader fuzzer: an offset past 2^63 saturates the access to
  // the empty range [2^63 - 1, 2^63 - 1), which a slot declared larger than
  // that used to accept.
  Program p = sample_program();
  auto& x = inst<DmaLoad>(p, 0, 0).xfer;
  p.args[x.dram.slot].bytes = ~uint64_t{0} / 128 * 128;
  x.dram.offset = uint64_t{1} << 63;
  EXPECT_THROW(validate(p, testing::test_limits()), Error);
}

}  // namespace
}  // namespace spyre::rt
