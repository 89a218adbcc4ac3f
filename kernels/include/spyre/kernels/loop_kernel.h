// Loop kernels: the fused pointwise / reduction programs of compiled graphs.
//
// The compiler (torch_spyre._inductor) DESCRIBES a fused group of loop
// bodies as a LoopKernel: one iteration space shared by all nodes, the
// buffers it touches, and the bodies as a list of ops in SSA form whose
// buffer accesses are already resolved to per-dimension steps in each
// buffer's stick layout. build_loop_kernel EMITS the program:
//
//   outer vars  fixed inside a block, walked block by block;
//   row var     a block holds a range of it (the tile's rows), split across
//               cores;
//   col var     a block holds all of it (the tile's columns);
//   reduced-outer vars  (one node's) walked inside a block with
//               accumulating reductions.
//
// A block loads, for every buffer access, the box of whole sticks it needs
// into the scratchpad (stick-granular DMA), runs one Vector/Reduce
// instruction per op on tiles whose strides express the access (0 for a
// broadcast), and stores each output box back. Values produced and consumed
// inside the kernel stay in the scratchpad. Blocks of one core alternate
// between two scratchpad regions (double buffering), each planned by
// liveness. A full reduction with no kept dims spreads its first reduced
// dim over the cores and combines the partials over the ring.
//
// Every description is plain data (numbers, strings, lists), so the
// compiler can serialise it and rebuild the same program from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

// The loop variables of a kernel. kOuter and kReduced carry an index (the
// k-th outer var; the k-th reduced-outer var of the op's node).
enum class LoopRole : uint8_t { kOuter, kRow, kCol, kReduced };

// One loop variable walking dimension `dim` (host dims in memory order) of
// a buffer by `step` coordinates per iteration.
struct AccessVar {
  LoopRole role = LoopRole::kCol;
  uint32_t index = 0;
  uint32_t dim = 0;
  int64_t step = 0;
};

// buffer[index] with the index affine per dimension: host coordinates at all
// vars zero plus the vars that move them (vars with a zero step absent).
struct BufferAccess {
  std::vector<int64_t> base;
  std::vector<AccessVar> vars;
  const AccessVar* find(LoopRole role, uint32_t index = 0) const;
};

// coeff * var of an affine index expression.
struct IndexTerm {
  LoopRole role = LoopRole::kCol;
  uint32_t index = 0;
  int64_t coeff = 0;
};

// An argument slot of the program and the stick layout of its storage
// (host sizes in memory order without size-1 dims; see layouts.py).
struct LoopBuffer {
  std::string name;
  rt::DType dtype = rt::DType::kFloat32;
  uint64_t device_bytes = 0;
  bool is_output = false;
  std::vector<int64_t> device_size;
  std::vector<int64_t> host_sizes;
  // device bytes between consecutive sticks of the last host dim, and
  // between consecutive coordinates of every other host dim (the entry of
  // the last dim is unused)
  int64_t stick_stride_bytes = 0;
  std::vector<int64_t> dim_stride_bytes;
  // the slot's byte offset of host coordinate 0 (a multiple of 128: an
  // eager view that starts inside the storage)
  uint64_t offset_bytes = 0;
  // The stored sticks hold data outside the kernel's elements (an eager
  // output view into a larger row, a compiled store of half a stick): a
  // store may start inside a stick and writes only its own elements (a
  // masked DmaStore), so the neighbouring bytes survive whoever writes them
  // meanwhile (another core, another stream).
  bool shares_sticks = false;

  uint32_t rank() const { return static_cast<uint32_t>(host_sizes.size()); }
  uint32_t element_size() const { return rt::element_size(dtype); }
  uint32_t per_stick() const { return rt::elements_per_stick(dtype); }
};

enum class LoopOpKind : uint8_t {
  kLoad,       // buffer, access (none for a buffer an earlier node made)
  kConstant,   // value, dtype
  kIndex,      // value + scale * (terms + constant): an index expression
  kToDtype,    // args[0] converted to dtype (to_float: a float target)
  kUnary,      // name (a VecOp name, or exp2/expm1/log1p/ceil/square)
  kBinary,     // name (a binary VecOp name), args[0], args[1], dtype
  kSelect,     // args[0] ? args[1] : args[2], dtype
  kReduction,  // name (sum/max/min/prod/argmax/argmin/any/all/
               // welford_reduce), part (welford: 0 mean, 1 m2, 2 weight)
  kRandom,     // RandFill draws: name (uniform [value, value2) / normal of
               // mean value, std value2), seed; element counter `counter` +
               // (terms + constant), so a draw never depends on the blocks
};

struct LoopOp {
  LoopOpKind kind = LoopOpKind::kConstant;
  uint32_t node = 0;           // the fused node the op belongs to
  std::vector<uint32_t> args;  // ids (positions in LoopKernel::ops) of
                               // earlier ops
  std::string name;
  // the value's compute dtype (the compiler's: bool or float32; eager
  // kernels compute integers in int64 and round to narrower floats where
  // PyTorch does) or kToDtype's target; nullopt: a target with no device
  // representation
  std::optional<rt::DType> dtype = rt::DType::kFloat32;
  bool to_float = false;  // kToDtype into a floating type (float32/64)
  double value = 0;       // kConstant, kIndex, kRandom
  double value2 = 0;      // kRandom
  double scale = 1;       // kIndex
  std::string buffer;     // kLoad
  std::optional<BufferAccess> access;  // kLoad from device memory
  std::vector<IndexTerm> terms;        // kIndex, kRandom
  int64_t constant = 0;                // kIndex, kRandom
  uint32_t part = 0;                   // kReduction of welford_reduce
  uint64_t seed = 0, counter = 0;      // kRandom
};

// node's value op `value` written to `buffer`: through device memory when
// the buffer is an argument slot (then `access` is set), and kept in the
// scratchpad when a later node loads it.
struct LoopStore {
  uint32_t node = 0;
  uint32_t value = 0;
  std::string buffer;
  std::optional<BufferAccess> access;
};

struct LoopNode {
  std::vector<int64_t> reduced_outer;  // sizes of its reduced-outer vars
};

struct LoopKernel {
  std::string name;
  std::vector<int64_t> outer;   // sizes of the outer vars
  std::optional<int64_t> rows;  // size of the row var, if any
  std::optional<int64_t> cols;  // size of the col var, if any
  // after a column split: valid cols of the last row (nullopt: all full)
  std::optional<int64_t> col_tail;
  std::vector<LoopNode> nodes;
  std::vector<LoopBuffer> buffers;  // the argument slots, in slot order
  std::vector<LoopOp> ops;          // SSA: args refer to earlier ops
  std::vector<LoopStore> stores;    // in emission order (node by node)

  int64_t row_count() const { return rows.value_or(1); }
  int64_t col_count() const { return cols.value_or(1); }
};

struct LoopKernelOptions {
  Target target;              // the device planned for (program_builder.h)
  bool double_buffer = true;  // two scratchpad regions per core if they fit
};

// How the builder divided the work (reported by the compiler).
struct LoopKernelSummary {
  uint32_t cores = 0;
  uint64_t blocks = 0;
  int64_t rows_per_block = 0;
  uint64_t region_bytes = 0;
  bool double_buffered = false;
  uint64_t instructions = 0;
  bool cross_core_reduction = false;
};

struct LoopKernelProgram {
  rt::Program program;
  LoopKernelSummary summary;
};

// KernelBuildError (program_builder.h) for what has no device lowering;
// LoopKernelTooLarge when the smallest block does not fit a core's
// scratchpad (a compile error: the compiler never emits a wrong program).
class LoopKernelTooLarge : public KernelBuildError {
 public:
  using KernelBuildError::KernelBuildError;
};

// Checks the description's internal consistency (ids, slots, roles);
// raises KernelBuildError naming what is wrong.
void validate_loop_kernel(const LoopKernel& kernel);

LoopKernelProgram build_loop_kernel(const LoopKernel& kernel,
                                    const LoopKernelOptions& options);

// Names as the description spells them.
std::optional<LoopRole> loop_role_from_name(std::string_view name);
std::string_view loop_op_kind_name(LoopOpKind kind);
std::optional<LoopOpKind> loop_op_kind_from_name(std::string_view name);
// A VecOp as kUnary/kBinary/kSelect name it.
std::string_view vec_op_name(rt::VecOp op);

}  // namespace spyre::kernels
