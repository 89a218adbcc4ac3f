// Device programs: what the compiler emits and the device runs.
//
// A program has argument slots (tensors bound at launch), constants (uploaded
// once at load), and one instruction stream per used core. Instructions name
// device memory only symbolically, as (slot, byte offset); the patcher turns
// those into real addresses at launch (see patcher.h). Scratchpad addresses
// are plain byte offsets into the core's own scratchpad (its size is the
// device's, DeviceProperties::chip).
//
// Execution semantics (the contract every backend implements):
// - Each core runs its stream in program order functionally. A backend may
//   overlap instructions in time (dataflow), but only as far as the data
//   dependencies between them allow: overlapping scratchpad ranges, device
//   ranges of the same slot, and ring channels.
// - Ring channels connect exactly one RingSend to one RingRecv; a receive
//   waits for its send. They are the only ordering between cores inside a
//   launch; device memory written by one core and read by another in the same
//   launch must be ordered through a channel (a zero-byte send is a token).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "spyre/runtime/dtype.h"

namespace spyre::rt {

// A symbolic device address: byte `offset` into the tensor bound to `slot`.
// Slots [0, args.size()) are arguments; [args.size(), +constants.size()) are
// the program's constants.
struct SymAddr {
  uint32_t slot = 0;
  uint64_t offset = 0;
  bool operator==(const SymAddr&) const = default;
};

// A 3-D stick transfer between device memory and the scratchpad: `count2` x
// `count1` runs of `run_bytes` contiguous bytes (a whole number of sticks).
// Byte strides between runs may differ on the two sides; all offsets and
// strides are multiples of 128 so every transfer moves whole sticks.
struct StickTransfer {
  SymAddr dram;
  uint32_t spad = 0;
  uint32_t run_bytes = kStickBytes;
  uint32_t count1 = 1;
  uint32_t count2 = 1;
  int64_t dram_stride1 = 0;
  int64_t dram_stride2 = 0;
  uint32_t spad_stride1 = 0;
  uint32_t spad_stride2 = 0;
  // Cores whose loads carry the same nonzero group read the same bytes once
  // (a broadcast read, at most 8 cores); 0 means a private read.
  uint32_t share_group = 0;
  bool operator==(const StickTransfer&) const = default;
};

struct DmaLoad {
  StickTransfer xfer;
  bool operator==(const DmaLoad&) const = default;
};
// A store writes its runs whole or, with a write mask (LPDDR5's data mask),
// only bytes [mask_begin, mask_end) of each run: the run's other bytes keep
// what device memory holds. Kernels writing disjoint parts of one stick
// (other cores, other streams) therefore never undo each other's writes, and
// a store into part of a stick need not read the stick first.
struct DmaStore {
  StickTransfer xfer;
  uint32_t mask_begin = 0;
  uint32_t mask_end = 0;  // 0: no mask, every byte of each run
  bool masked() const { return mask_end != 0; }
  bool operator==(const DmaStore&) const = default;
};

// A row-indexed transfer between `count` rows of `row_bytes` (whole sticks)
// in the scratchpad, `spad_stride` apart, and a table of `table_rows` rows
// in device memory: scratchpad row r pairs with table row index[r]. The
// indices (int32 or int64) live in the scratchpad; an index outside
// [0, table_rows) is a device error, found before any row moves.
struct IndexedRows {
  SymAddr table;
  uint64_t table_rows = 0;
  uint64_t table_row_stride = 0;  // bytes between table rows, multiple of 128
  uint32_t row_bytes = kStickBytes;
  uint32_t index_spad = 0;
  DType index_dtype = DType::kInt64;
  uint32_t count = 0;
  uint32_t spad = 0;
  uint32_t spad_stride = 0;
  bool operator==(const IndexedRows&) const = default;
};
// Table row index[r] into scratchpad row r (embedding, index_select).
struct DmaGather : IndexedRows {
  bool operator==(const DmaGather&) const = default;
};
// Scratchpad row r into table row index[r] (index_copy, a KV cache's
// update); table rows no index names are left as they are. When an index
// repeats, the later row wins.
struct DmaScatter : IndexedRows {
  bool operator==(const DmaScatter&) const = default;
};

// Core-to-core transfer over the ring (the shorter direction is taken).
struct RingSend {
  uint32_t channel = 0;
  uint32_t dst_core = 0;
  uint32_t spad = 0;
  uint32_t bytes = 0;
  bool operator==(const RingSend&) const = default;
};
// How a receive lands its payload through the on-chip transpose pipeline
// (a restickify on the way in): the payload is whole sticks, each one row of
// `dtype` elements; element c of stick r lands at
// spad + c * pitch + r * element_size(dtype), so the stick dimension becomes
// the row dimension. Only the first `cols` elements of each stick land (a
// ragged last stick of columns). `cols` 0: a plain copy (pitch must be 0).
struct StickTranspose {
  DType dtype = DType::kFloat16;
  uint32_t cols = 0;
  uint32_t pitch = 0;
  bool enabled() const { return cols != 0; }
  bool operator==(const StickTranspose&) const = default;
};
struct RingRecv {
  uint32_t channel = 0;
  uint32_t src_core = 0;
  uint32_t spad = 0;
  uint32_t bytes = 0;
  StickTranspose transpose;
  bool operator==(const RingRecv&) const = default;
};

// A 2-D view of scratchpad data: element (r, c) is at
// offset + r * row_stride + c * col_stride (bytes). A stride of 0 broadcasts.
struct Tile {
  uint32_t offset = 0;
  DType dtype = DType::kFloat16;
  int32_t row_stride = 0;
  int32_t col_stride = 0;
  bool operator==(const Tile&) const = default;
};

// C[m, n] (+)= sum_k A[m, k] * B[k, n] on the matrix unit. A and B are fp16,
// bf16 or fp32 with C fp32, or int8 with C int32; products accumulate at C's
// precision.
struct MatMul {
  Tile a, b, c;
  uint32_t m = 0, n = 0, k = 0;
  bool accumulate = false;  // add to C instead of overwriting it
  bool operator==(const MatMul&) const = default;
};

enum class VecOp : uint8_t {
  // unary: dst = f(src0)
  kCopy,
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kRecip,
  kTanh,
  kSigmoid,
  kRelu,
  kGelu,
  kGeluTanh,
  kSilu,
  kErf,
  kSin,
  kCos,
  kLogicalNot,
  kFloor,
  kBitNot,  // integer domain: ~x
  // binary: dst = f(src0, src1), src1 may be the immediate
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,
  kMin,
  kPow,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr,
  kRemainder,
  // integer domain: bit patterns (PyTorch's bitwise ops on integer tensors)
  kBitAnd,
  kBitOr,
  kBitXor,
  // ternary: dst = src0 ? src1 : src2
  kSelect,
  // nullary: kFill dst = imm; kIota dst[r, c] = imm + (r * cols + c) * imm2
  kFill,
  kIota,
};
inline constexpr int kNumVecOps = static_cast<int>(VecOp::kIota) + 1;
int vec_op_arity(VecOp op);  // 0 for fill/iota, 1, 2 or 3
bool vec_op_is_compare(VecOp op);
// kBitNot, kBitAnd, kBitOr, kBitXor: integer or bool tiles only.
bool vec_op_is_bitwise(VecOp op);

// Elementwise work on the vector unit over a rows x cols iteration space.
// Floating inputs are computed in fp32 and rounded once to dst's dtype;
// integer inputs in int64.
struct Vector {
  VecOp op = VecOp::kCopy;
  Tile dst, src0, src1, src2;
  uint32_t rows = 0, cols = 0;
  bool src1_is_imm = false;  // binary ops: use `imm` in place of src1
  double imm = 0;
  double imm2 = 0;
  bool operator==(const Vector&) const = default;
};

enum class RedOp : uint8_t { kSum, kMax, kMin, kArgMax, kArgMin, kProd };
inline constexpr int kNumRedOps = static_cast<int>(RedOp::kProd) + 1;

// Reduces each row of a rows x cols tile to one element: dst(r, 0). Floating
// data accumulates in fp32. Arg reductions write int64 column indices plus
// `index_base`; ties take the first index, NaN wins as in PyTorch.
// With accumulate, the existing dst joins the reduction (for tiled rows; not
// valid for arg reductions).
struct Reduce {
  RedOp op = RedOp::kSum;
  Tile dst, src;
  uint32_t rows = 0, cols = 0;
  bool accumulate = false;
  int64_t index_base = 0;
  bool operator==(const Reduce&) const = default;
};

// Fills a tile with counter-based random numbers (Philox-4x32-10): element i
// of the tile draws from stream (seed, offset + i), so results depend only on
// the generator state, not on how work is split across cores.
enum class RandDist : uint8_t { kUniform, kNormal };
struct RandFill {
  Tile dst;
  uint32_t rows = 0, cols = 0;
  RandDist dist = RandDist::kUniform;
  uint64_t seed = 0;
  uint64_t offset = 0;
  double a = 0, b = 1;  // uniform: [a, b); normal: mean a, std b
  bool operator==(const RandFill&) const = default;
};

using Instruction =
    std::variant<DmaLoad, DmaStore, DmaGather, RingSend, RingRecv, MatMul,
                 Vector, Reduce, RandFill, DmaScatter>;
const char* instruction_name(const Instruction& inst);
// The row-indexed transfer of a DmaGather or DmaScatter; null otherwise.
const IndexedRows* indexed_rows_of(const Instruction& inst);

struct CoreProgram {
  uint32_t core = 0;
  uint32_t scratchpad_bytes = 0;  // footprint; every scratchpad access inside
  std::vector<Instruction> instructions;
  bool operator==(const CoreProgram&) const = default;
};

// How a tensor bound to a slot is laid out on the device, as the compiler
// assumed it: device dimensions row-major, the last being the stick.
struct SlotLayout {
  std::vector<int64_t> device_size;
  bool operator==(const SlotLayout&) const = default;
};

struct ArgSlot {
  std::string name;
  DType dtype = DType::kFloat16;
  uint64_t bytes = 0;  // the bound allocation must hold at least this much
  SlotLayout layout;   // empty device_size: any layout accepted
  bool is_output = false;
  bool operator==(const ArgSlot&) const = default;
};

struct Constant {
  std::string name;
  DType dtype = DType::kFloat16;
  std::vector<uint8_t> data;  // size is a multiple of 128
  bool operator==(const Constant&) const = default;
};

struct Program {
  std::string name;
  std::vector<ArgSlot> args;
  std::vector<Constant> constants;
  std::vector<CoreProgram> cores;  // each used core once, any order
  bool operator==(const Program&) const = default;

  uint32_t num_slots() const {
    return static_cast<uint32_t>(args.size() + constants.size());
  }
  uint64_t instruction_count() const {
    uint64_t n = 0;
    for (const CoreProgram& core : cores) n += core.instructions.size();
    return n;
  }
};

// Limits a program is validated against: DeviceProperties::limits() of the
// device it is for.
struct ProgramLimits {
  uint32_t num_cores = 0;
  uint32_t scratchpad_bytes = 0;
  uint32_t max_broadcast_cores = 0;  // members of one share group
};

// Checks every invariant of a program: slot indices, alignment, scratchpad
// bounds, dtype support per unit, ring channel pairing, share groups.
// Throws Error(kMalformedProgram) naming the core, instruction and field.
void validate(const Program& program, const ProgramLimits& limits);

// Versioned binary format ("SPYREPRG", version, little-endian fields).
// 2: bitwise VecOps; 3: DmaScatter; 4: DmaStore's write mask; 5: RingRecv's
// transposed landing (StickTranspose).
inline constexpr uint32_t kProgramFormatVersion = 5;
std::vector<uint8_t> serialize(const Program& program);
// Parses and validates; any malformed input raises kMalformedProgram.
Program deserialize(std::span<const uint8_t> bytes,
                    const ProgramLimits& limits);

// The byte range [lo, hi) of device memory, relative to the slot's base,
// that an access to `addr` can touch; used by the patch plan and backends.
struct DeviceExtent {
  uint32_t slot = 0;
  int64_t lo = 0;
  int64_t hi = 0;
};

// Every device-memory access of an instruction, in a fixed order (the order
// the patch plan numbers relocations in). Empty for pure compute.
std::vector<DeviceExtent> device_extents(const Instruction& inst);

// Every scratchpad byte range [lo, hi) an instruction reads or writes.
struct SpadRange {
  int64_t lo = 0;
  int64_t hi = 0;
  bool write = false;
};
std::vector<SpadRange> scratchpad_ranges(const Instruction& inst);

}  // namespace spyre::rt
