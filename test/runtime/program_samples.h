// Valid sample programs for the program, serialisation and patcher tests,
// plus the helpers that regenerate and reseal serialised bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "spyre/runtime/program.h"

namespace spyre::rt::testing {

inline Tile tile(uint32_t offset, DType dtype, int32_t row_stride,
                 int32_t col_stride) {
  return Tile{offset, dtype, row_stride, col_stride};
}

inline StickTransfer transfer(uint32_t slot, uint64_t offset, uint32_t spad,
                              uint32_t run_bytes, uint32_t count1 = 1,
                              int64_t dram_stride1 = 0,
                              uint32_t spad_stride1 = 0) {
  StickTransfer x;
  x.dram = {slot, offset};
  x.spad = spad;
  x.run_bytes = run_bytes;
  x.count1 = count1;
  x.dram_stride1 = dram_stride1;
  x.spad_stride1 = spad_stride1;
  return x;
}

// Slots of sample_program().
inline constexpr uint32_t kSlotX = 0;     // fp16 32 x 64, 4096 bytes
inline constexpr uint32_t kSlotW = 1;     // fp16 64 x 32, 4096 bytes
inline constexpr uint32_t kSlotY = 2;     // fp32 output, 8192 bytes
inline constexpr uint32_t kSlotBias = 3;  // constant, fp32 x 64

// Two cores (ids 0 and 5) using every instruction type: loads (one shared,
// one of a constant), a matmul, vector ops of each arity (one with an
// immediate, a compare), an arg reduction, a random fill, a gather, stores
// (one with a negative stride) and a ring channel.
inline Program sample_program() {
  Program p;
  p.name = "sample";
  p.args = {
      {"x", DType::kFloat16, 4096, {{32, 64}}, false},
      {"w", DType::kFloat16, 4096, {}, false},
      {"y", DType::kFloat32, 8192, {{16, 128}}, true},
  };
  Constant bias{"bias", DType::kFloat32, std::vector<uint8_t>(256)};
  for (size_t i = 0; i < bias.data.size(); ++i) {
    bias.data[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  p.constants = {bias};

  CoreProgram c0{0, 65536, {}};
  auto& i0 = c0.instructions;
  i0.push_back(DmaLoad{transfer(kSlotX, 0, 0, 128, 32, 128, 128)});
  StickTransfer shared_w = transfer(kSlotW, 0, 4096, 4096);
  shared_w.share_group = 1;
  i0.push_back(DmaLoad{shared_w});
  i0.push_back(DmaLoad{transfer(kSlotBias, 0, 8192, 256)});
  i0.push_back(MatMul{tile(0, DType::kFloat16, 128, 2),
                      tile(4096, DType::kFloat16, 64, 2),
                      tile(16384, DType::kFloat32, 128, 4), 32, 32, 64, false});
  Vector add;
  add.op = VecOp::kAdd;
  add.dst = add.src0 = tile(16384, DType::kFloat32, 128, 4);
  add.src1 = tile(8192, DType::kFloat32, 0, 4);  // bias broadcast over rows
  add.rows = 32;
  add.cols = 32;
  i0.push_back(add);
  Vector positive;
  positive.op = VecOp::kGt;
  positive.dst = tile(20480, DType::kBool, 32, 1);
  positive.src0 = tile(16384, DType::kFloat32, 128, 4);
  positive.src1_is_imm = true;
  positive.imm = 0.5;
  positive.rows = 32;
  positive.cols = 32;
  i0.push_back(positive);
  Vector select;
  select.op = VecOp::kSelect;
  select.dst = select.src1 = tile(16384, DType::kFloat32, 128, 4);
  select.src0 = tile(20480, DType::kBool, 32, 1);
  select.src2 = tile(8192, DType::kFloat32, 0, 4);
  select.rows = 32;
  select.cols = 32;
  i0.push_back(select);
  Reduce argmax;
  argmax.op = RedOp::kArgMax;
  argmax.dst = tile(24576, DType::kInt64, 8, 0);
  argmax.src = tile(16384, DType::kFloat32, 128, 4);
  argmax.rows = 32;
  argmax.cols = 32;
  argmax.index_base = 3;
  i0.push_back(argmax);
  RandFill noise;
  noise.dst = tile(28672, DType::kFloat32, 128, 4);
  noise.rows = 4;
  noise.cols = 32;
  noise.dist = RandDist::kNormal;
  noise.seed = 42;
  noise.offset = 1000;
  noise.a = 0;
  noise.b = 2;
  i0.push_back(noise);
  Vector iota;
  iota.op = VecOp::kIota;
  iota.dst = tile(32768, DType::kInt32, 128, 4);
  iota.rows = 1;
  iota.cols = 32;
  iota.imm = 1;
  iota.imm2 = 2;
  i0.push_back(iota);
  DmaGather gather;
  gather.table = {kSlotW, 0};
  gather.table_rows = 32;
  gather.table_row_stride = 128;
  gather.row_bytes = 128;
  gather.index_spad = 24576;
  gather.index_dtype = DType::kInt64;
  gather.count = 4;
  gather.spad = 36864;
  gather.spad_stride = 128;
  i0.push_back(gather);
  i0.push_back(DmaStore{transfer(kSlotY, 0, 16384, 128, 32, 256, 128)});
  i0.push_back(RingSend{7, 5, 16384, 4096});

  CoreProgram c1{5, 8192, {}};
  StickTransfer shared_w1 = shared_w;
  shared_w1.spad = 0;
  c1.instructions.push_back(DmaLoad{shared_w1});
  // The 32 sticks land transposed: 64 rows of 32 fp16, 64 bytes apart.
  c1.instructions.push_back(
      RingRecv{7, 0, 4096, 4096, StickTranspose{DType::kFloat16, 64, 64}});
  // Two runs written backwards from byte 4224: [3968, 4224) of y, bytes
  // [4, 124) of each under a write mask.
  c1.instructions.push_back(
      DmaStore{transfer(kSlotY, 4096, 4096, 128, 2, -128, 128), 4, 124});
  p.cores = {c0, c1};
  return p;
}

// One core copying one stick: the smallest useful program.
inline Program copy_program() {
  Program p;
  p.name = "copy";
  p.args = {{"src", DType::kFloat32, 128, {}, false},
            {"dst", DType::kFloat32, 128, {}, true}};
  CoreProgram core{3, 128, {}};
  core.instructions.push_back(DmaLoad{transfer(0, 0, 0, 128)});
  core.instructions.push_back(DmaStore{transfer(1, 0, 0, 128)});
  p.cores = {core};
  return p;
}

// A token ring over four cores (zero-byte sends) and an int8 matmul.
inline Program ring_program() {
  Program p;
  p.name = "ring";
  p.args = {{"out", DType::kInt32, 4 * 512, {{4, 128}}, true}};
  for (uint32_t c = 0; c < 4; ++c) {
    CoreProgram core{c * 8, 4096, {}};
    core.instructions.push_back(
        MatMul{tile(0, DType::kInt8, 16, 1), tile(256, DType::kInt8, 16, 1),
               tile(512, DType::kInt32, 64, 4), 16, 16, 16, c > 0});
    if (c > 0)
      core.instructions.push_back(RingRecv{c - 1, (c - 1) * 8, 0, 0, {}});
    if (c < 3) core.instructions.push_back(RingSend{c, (c + 1) * 8, 0, 0});
    core.instructions.push_back(DmaStore{transfer(0, c * 512, 512, 512)});
    p.cores.push_back(core);
  }
  return p;
}

// Gathers four rows of a table and scatters them into another.
inline Program scatter_program() {
  Program p;
  p.name = "scatter";
  p.args = {{"table", DType::kFloat16, 32 * 128, {}, false},
            {"index", DType::kInt64, 128, {}, false},
            {"out", DType::kFloat16, 32 * 128, {}, true}};
  CoreProgram core{0, 4096, {}};
  core.instructions.push_back(DmaLoad{transfer(1, 0, 0, 128)});
  DmaGather gather;
  gather.table = {0, 0};
  gather.table_rows = 32;
  gather.table_row_stride = 128;
  gather.index_spad = 0;
  gather.count = 4;
  gather.spad = 128;
  gather.spad_stride = 128;
  core.instructions.push_back(gather);
  DmaScatter scatter;
  static_cast<IndexedRows&>(scatter) = gather;
  scatter.table = {2, 0};
  core.instructions.push_back(scatter);
  p.cores.push_back(core);
  return p;
}

// The programs serialised into test/data/program_corpus/.
inline std::vector<std::pair<std::string, Program>> corpus_programs() {
  return {{"sample.spyreprg", sample_program()},
          {"copy.spyreprg", copy_program()},
          {"ring.spyreprg", ring_program()},
          {"scatter.spyreprg", scatter_program()}};
}

inline uint32_t test_crc32(std::span<const uint8_t> bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
  }
  return crc ^ 0xFFFFFFFFu;
}

// Rewrites the trailing checksum so a mutation reaches the parser.
inline void reseal(std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4) return;
  size_t at = bytes.size() - 4;
  uint32_t crc = test_crc32(std::span<const uint8_t>(bytes).first(at));
  for (int i = 0; i < 4; ++i)
    bytes[at + i] = static_cast<uint8_t>(crc >> (8 * i));
}

}  // namespace spyre::rt::testing
