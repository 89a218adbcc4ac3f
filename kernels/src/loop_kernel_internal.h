// Internals of build_loop_kernel (loop_kernel.h), shared by its sources:
// loop_kernel_box.cpp (scratchpad regions, stick boxes and their DMA),
// loop_kernel_emit.cpp (one block's instructions), loop_kernel_reduce.cpp
// (its reductions), loop_kernel_index.cpp (index values and random draws),
// loop_kernel_store.cpp (stores), loop_kernel.cpp (the description's checks
// and the work division over cores).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "spyre/kernels/loop_kernel.h"

namespace spyre::kernels::loop {

// Values compute in fp32 (bool for logic) whatever the buffers' dtypes.
inline constexpr rt::DType kF32 = rt::DType::kFloat32;

// First-fit allocator of stick-aligned ranges of one block's region with
// frees; records the peak so a dry run sizes the region.
class RegionAllocator {
 public:
  uint64_t alloc(uint64_t bytes);
  void free(uint64_t offset, uint64_t bytes);
  uint64_t peak() const { return peak_; }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> free_;  // (offset, size) sorted
  uint64_t top_ = 0;
  uint64_t peak_ = 0;
};

// Values of the vars fixed for one block: every outer var, and inside a
// reduction over several dims the reduced-outer vars of the current step.
struct Fixed {
  std::vector<int64_t> outer;
  std::vector<int64_t> reduced;
  std::optional<int64_t> value(LoopRole role, uint32_t index) const;
};

// How the boxes' sticks are walked, for the padding fill of a store.
enum class StickWalk : uint8_t {
  kNone,
  kRow,    // the row var walks the sticks one element a step
  kCol,    // the col var does
  kJoint,  // rows and cols together walk one run of the sticks
  // the same, one run per point of the other dims (no padding fill)
  kJointLins,
};

// The sticks of one buffer access for one block, as DMA transfers.
struct Box {
  uint64_t bytes = 0;
  std::vector<rt::StickTransfer> transfers;  // spad relative to the box start
  uint32_t elem_offset = 0;  // byte offset of element (0, 0) inside the box
  int64_t row_stride = 0;
  int64_t col_stride = 0;
  bool has_rows = false;
  bool has_cols = false;
  StickWalk stick_walk = StickWalk::kNone;
  int64_t stick_count = 0;
  int64_t valid = 0;  // elements of the stick walk in this box
  // The stick runs of one lin point are apart in device memory: each
  // transfer's count1 walks them one stick at a time.
  bool sticks_apart = false;
};

// The box of `access` into `buffer` (slot `slot`) for the block starting at
// row r0 of nrows x ncols. `worst_alignment` sizes it for any stick
// alignment of its first element (every block of a core plans alike).
Box make_box(const LoopKernel& kernel, const LoopBuffer& buffer, uint32_t slot,
             const BufferAccess& access, const Fixed& fixed, int64_t r0,
             int64_t nrows, int64_t ncols, bool worst_alignment = false);

// Raises KernelBuildError when a store box cannot be written without two
// blocks sharing a stick or leaving padding unfilled.
void check_store_box(const LoopKernel& kernel, const LoopBuffer& buffer,
                     const Box& box, const BufferAccess& access);

// A full reduction spread over cores: this core's range of the first
// reduced-outer var, and the cores taking part (the first combines).
struct RingSplit {
  int64_t lo = 0, hi = 0;
  uint32_t core = 0;
  std::vector<uint32_t> cores;
};

// Thrown by a helper core of a cross-core reduction once it has sent its
// partial: the rest of the block is the first core's.
struct PartialSent {};

// Ops that compute the same value share one tile: op -> the first op
// computing its value (loop_kernel_emit.cpp).
std::vector<uint32_t> share_equal_values(const LoopKernel& k);

// A load whose box is the same in every block of a core (a broadcast
// operand): loaded once, at scratchpad offset `spad`, before the core's first
// block, and read by every block from there.
struct ResidentLoad {
  uint32_t op = 0;
  uint32_t spad = 0;
  Box box;
};

// Emits one block's instructions into `out` (or, with `out` null, only plans
// its scratchpad through `alloc`).
class BlockEmitter {
 public:
  BlockEmitter(const LoopKernel& kernel, CoreBuilder* out, uint64_t region,
               RegionAllocator& alloc);
  void set_ring_split(RingSplit split) { ring_ = std::move(split); }
  // Loads already in the scratchpad (`resident` outlives the emitter).
  void set_resident(const std::vector<ResidentLoad>* resident) {
    resident_ = resident;
  }
  // The block at row r0 of R rows (of R_alloc planned) and K columns
  // (nullopt: all of them).
  void block(const Fixed& fixed, int64_t r0, int64_t R, int64_t R_alloc,
             std::optional<int64_t> K = std::nullopt);

 private:
  struct Tile {
    uint64_t offset = 0;
    rt::DType dtype = rt::DType::kFloat32;
    int64_t row_stride = 0, col_stride = 0;
    bool has_rows = false, has_cols = false;
    std::optional<std::pair<uint64_t, uint64_t>> alloc;  // (offset, bytes)
  };
  using TileId = size_t;
  using Eval = std::function<TileId(uint32_t)>;
  struct Shape {  // the block being emitted
    Fixed fixed;
    int64_t r0 = 0, R = 1, K = 1;
  };

  rt::Tile device_tile(const Tile& t) const;
  rt::Tile device_tile(TileId t) const { return device_tile(tiles_[t]); }
  void vec(rt::VecOp op, const Tile& dst, const std::vector<Tile>& srcs,
           int64_t rows, int64_t cols, std::optional<double> imm = {},
           double imm2 = 0);
  void vec(rt::VecOp op, TileId dst, const std::vector<TileId>& srcs,
           int64_t rows, int64_t cols, std::optional<double> imm = {},
           double imm2 = 0);
  void reduce(rt::RedOp op, TileId dst, TileId src, int64_t rows, int64_t cols,
              bool accumulate = false);
  TileId new_tile(rt::DType dtype, bool has_rows, bool has_cols);
  void free_tile(TileId t);
  int64_t rows_of(TileId t, const Shape& s) const;
  rt::DType accumulator(TileId x) const;
  int64_t cols_of(TileId t, const Shape& s) const;

  TileId compute(uint32_t op, const Eval& ev, const Shape& s);
  TileId load_box(const LoopOp& op, const Shape& s);
  std::optional<TileId> resident_tile(uint32_t op);
  // loop_kernel_index.cpp: values of the iteration itself
  struct Affine {  // row * r + col * c + rest at block element (r, c)
    int64_t row = 0, col = 0, rest = 0;
  };
  Affine affine_in_block(const LoopOp& op, const Shape& s) const;
  TileId index_tile(const LoopOp& op, const Shape& s);
  TileId random_tile(const LoopOp& op, const Shape& s);
  TileId unary(const LoopOp& op, TileId x, const Shape& s,
               std::optional<TileId> reuse = std::nullopt);
  void accurate_near_zero(bool expm1, TileId x, TileId dst, int64_t rows,
                          int64_t cols);
  TileId binary(const LoopOp& op, const Eval& ev, const Shape& s);
  TileId reduction(uint32_t op, const Eval& ev, const Shape& s);
  TileId reduction_multi(uint32_t op, const Shape& s);
  TileId combine_across_cores(rt::RedOp op, TileId partial);
  // loop_kernel_store.cpp: a store's box in the region and the value
  // written into it; stores into a buffer that shares its sticks are masked
  // to the elements written
  struct StoreBox {
    uint64_t offset = 0, bytes = 0;  // of the box in the region
    Box box;
    Tile out;  // the stored elements
    const LoopBuffer* buffer = nullptr;
  };
  StoreBox store_box(const LoopStore& st, const Shape& s);
  void store(const StoreBox& box, TileId value, const Shape& s);
  void emit_masked_stores(const StoreBox& b, const rt::StickTransfer& x,
                          uint64_t begin, uint64_t end);
  // Whether the store's value may be made straight into its box: one
  // instruction of the buffer's dtype whose result nothing else reads.
  bool may_write_in_place(const LoopStore& st) const;
  // The store box's tile when `op` is the value being stored there and
  // makes a result of its dtype and shape.
  std::optional<TileId> in_place(const LoopOp& op, rt::DType dtype,
                                 bool has_rows, bool has_cols);
  [[noreturn]] void fail(const std::string& what) const;

  const LoopKernel& k_;
  // op -> the op whose tile it shares (ops computing the same value)
  std::vector<uint32_t> canonical_;
  CoreBuilder* out_;
  uint64_t region_;
  RegionAllocator& alloc_;
  int64_t R_alloc_ = 1, K_alloc_ = 1;
  std::vector<Tile> tiles_;
  std::map<std::string, TileId> kept_;               // in-kernel buffers
  std::map<uint32_t, std::vector<TileId>> welford_;  // value op -> parts
  std::optional<RingSplit> ring_;
  const std::vector<ResidentLoad>* resident_ = nullptr;
  // the block's uses left per op and the ops' tiles (set by block())
  const std::vector<int64_t>* remaining_ = nullptr;
  const std::map<uint32_t, TileId>* bound_ = nullptr;
  const std::map<TileId, int64_t>* refs_ = nullptr;
  // the store being made when its value may be written into its box
  struct StoreTarget {
    uint32_t op = 0;
    Tile box;
  };
  std::optional<StoreTarget> store_target_;
  std::optional<TileId> in_place_;  // the tile made in a store's box
  // the dtype the next single-instruction op writes its result in (a
  // rounding it feeds alone, folded into it)
  std::optional<rt::DType> write_dtype_;
  bool rounding_folds_into(uint32_t src) const;
  // The tile of op `arg` when the op being made is its last use and no
  // other op shares the tile: the result may overwrite it.
  std::optional<TileId> dying_tile(uint32_t arg) const;
};

const LoopBuffer* find_buffer(const LoopKernel& kernel, const std::string& name,
                              uint32_t* slot);
std::optional<rt::VecOp> vec_op_from_name(std::string_view name);

}  // namespace spyre::kernels::loop
