// Program introspection (names, extents, scratchpad ranges) and validation.
#include "spyre/runtime/program.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include "spyre/runtime/error.h"

namespace spyre::rt {

namespace {

// Extents are computed in 128-bit arithmetic and saturated to int64, so a
// hostile program (huge counts times huge strides) cannot wrap around into a
// range that looks valid.
__extension__ typedef __int128 Wide;

int64_t saturate(Wide value) {
  constexpr Wide kMax = std::numeric_limits<int64_t>::max();
  constexpr Wide kMin = std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(std::clamp(value, kMin, kMax));
}

// [lo, hi) spanned by `first + i * stride` for i in [0, count), relative to
// `first`, ignoring the element size (added by callers).
struct Span {
  Wide lo = 0;
  Wide hi = 0;  // offset of the last start, inclusive
};

Span strided_span(uint64_t count, Wide stride) {
  Wide last = count == 0 ? 0 : static_cast<Wide>(count - 1) * stride;
  return {std::min<Wide>(0, last), std::max<Wide>(0, last)};
}

Span add(Span a, Span b) { return {a.lo + b.lo, a.hi + b.hi}; }

// A device access with its symbolic address, shared by device_extents and
// the patch plan.
struct DeviceAccess {
  SymAddr addr;
  int64_t lo = 0;
  int64_t hi = 0;
};

DeviceAccess transfer_access(const StickTransfer& x) {
  Span s = add(strided_span(x.count1, x.dram_stride1),
               strided_span(x.count2, x.dram_stride2));
  Wide base = static_cast<Wide>(x.dram.offset);
  return {x.dram, saturate(base + s.lo), saturate(base + s.hi + x.run_bytes)};
}

DeviceAccess table_access(const IndexedRows& g) {
  Wide base = static_cast<Wide>(g.table.offset);
  Wide rows = g.table_rows == 0 ? 0 : static_cast<Wide>(g.table_rows - 1);
  Wide last = rows * static_cast<Wide>(g.table_row_stride);
  return {g.table, saturate(base), saturate(base + last + g.row_bytes)};
}

std::vector<DeviceAccess> device_accesses(const Instruction& inst) {
  if (auto* load = std::get_if<DmaLoad>(&inst)) {
    return {transfer_access(load->xfer)};
  }
  if (auto* store = std::get_if<DmaStore>(&inst)) {
    return {transfer_access(store->xfer)};
  }
  if (const IndexedRows* rows = indexed_rows_of(inst)) {
    return {table_access(*rows)};
  }
  return {};
}

// The bytes a rows x cols tile touches; nullopt for an empty iteration space.
std::optional<SpadRange> tile_range(const Tile& t, uint32_t rows, uint32_t cols,
                                    bool write) {
  if (rows == 0 || cols == 0) return std::nullopt;
  Span s =
      add(strided_span(rows, t.row_stride), strided_span(cols, t.col_stride));
  Wide base = t.offset;
  return SpadRange{saturate(base + s.lo),
                   saturate(base + s.hi + element_size(t.dtype)), write};
}

std::optional<SpadRange> linear_range(uint64_t start, Wide bytes, bool write) {
  if (bytes <= 0) return std::nullopt;
  Wide base = static_cast<Wide>(start);
  return SpadRange{saturate(base), saturate(base + bytes), write};
}

std::optional<SpadRange> transfer_spad_range(const StickTransfer& x,
                                             bool write) {
  if (x.count1 == 0 || x.count2 == 0) return std::nullopt;
  Span s = add(strided_span(x.count1, x.spad_stride1),
               strided_span(x.count2, x.spad_stride2));
  Wide base = x.spad;
  return SpadRange{saturate(base + s.lo), saturate(base + s.hi + x.run_bytes),
                   write};
}

struct RangeCollector {
  std::vector<SpadRange> ranges;
  void add(std::optional<SpadRange> range) {
    if (range) ranges.push_back(*range);
  }
};

std::vector<SpadRange> ranges_of(const DmaLoad& i) {
  RangeCollector out;
  out.add(transfer_spad_range(i.xfer, /*write=*/true));
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const DmaStore& i) {
  RangeCollector out;
  out.add(transfer_spad_range(i.xfer, /*write=*/false));
  return out.ranges;
}
// The indices are read; the rows are written by a gather, read by a
// scatter.
std::vector<SpadRange> indexed_rows_ranges(const IndexedRows& i,
                                           bool rows_written) {
  RangeCollector out;
  uint32_t index_size = element_size(i.index_dtype);
  out.add(linear_range(i.index_spad, static_cast<Wide>(i.count) * index_size,
                       false));
  if (i.count > 0) {
    Wide last = static_cast<Wide>(i.count - 1) * i.spad_stride;
    out.add(linear_range(i.spad, last + i.row_bytes, rows_written));
  }
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const DmaGather& i) {
  return indexed_rows_ranges(i, true);
}
std::vector<SpadRange> ranges_of(const DmaScatter& i) {
  return indexed_rows_ranges(i, false);
}
std::vector<SpadRange> ranges_of(const RingSend& i) {
  RangeCollector out;
  out.add(linear_range(i.spad, i.bytes, false));
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const RingRecv& i) {
  RangeCollector out;
  if (i.transpose.enabled()) {
    // `cols` landed rows of one element per received stick.
    const Tile landed{i.spad, i.transpose.dtype,
                      static_cast<int32_t>(i.transpose.pitch),
                      static_cast<int32_t>(element_size(i.transpose.dtype))};
    out.add(tile_range(landed, i.transpose.cols, i.bytes / kStickBytes, true));
  } else {
    out.add(linear_range(i.spad, i.bytes, true));
  }
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const MatMul& i) {
  RangeCollector out;
  out.add(tile_range(i.a, i.m, i.k, false));
  out.add(tile_range(i.b, i.k, i.n, false));
  if (i.accumulate) out.add(tile_range(i.c, i.m, i.n, false));
  out.add(tile_range(i.c, i.m, i.n, true));
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const Vector& i) {
  RangeCollector out;
  int arity = vec_op_arity(i.op);
  if (arity >= 1) out.add(tile_range(i.src0, i.rows, i.cols, false));
  if (arity >= 2 && !(arity == 2 && i.src1_is_imm)) {
    out.add(tile_range(i.src1, i.rows, i.cols, false));
  }
  if (arity >= 3) out.add(tile_range(i.src2, i.rows, i.cols, false));
  out.add(tile_range(i.dst, i.rows, i.cols, true));
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const Reduce& i) {
  RangeCollector out;
  out.add(tile_range(i.src, i.rows, i.cols, false));
  if (i.accumulate) out.add(tile_range(i.dst, i.rows, 1, false));
  out.add(tile_range(i.dst, i.rows, 1, true));
  return out.ranges;
}
std::vector<SpadRange> ranges_of(const RandFill& i) {
  RangeCollector out;
  out.add(tile_range(i.dst, i.rows, i.cols, true));
  return out.ranges;
}

}  // namespace

const char* instruction_name(const Instruction& inst) {
  static constexpr const char* kNames[] = {
      "DmaLoad", "DmaStore", "DmaGather", "RingSend", "RingRecv",
      "MatMul",  "Vector",   "Reduce",    "RandFill", "DmaScatter"};
  static_assert(std::size(kNames) == std::variant_size_v<Instruction>);
  return kNames[inst.index()];
}

const IndexedRows* indexed_rows_of(const Instruction& inst) {
  if (auto* gather = std::get_if<DmaGather>(&inst)) return gather;
  if (auto* scatter = std::get_if<DmaScatter>(&inst)) return scatter;
  return nullptr;
}

int vec_op_arity(VecOp op) {
  if (op >= VecOp::kFill) return 0;
  if (op == VecOp::kSelect) return 3;
  if (op >= VecOp::kAdd) return 2;
  return 1;
}

bool vec_op_is_compare(VecOp op) {
  return op >= VecOp::kEq && op <= VecOp::kGe;
}

bool vec_op_is_bitwise(VecOp op) {
  return op == VecOp::kBitNot || op == VecOp::kBitAnd || op == VecOp::kBitOr ||
         op == VecOp::kBitXor;
}

std::vector<DeviceExtent> device_extents(const Instruction& inst) {
  std::vector<DeviceExtent> extents;
  for (const DeviceAccess& access : device_accesses(inst)) {
    extents.push_back({access.addr.slot, access.lo, access.hi});
  }
  return extents;
}

std::vector<SpadRange> scratchpad_ranges(const Instruction& inst) {
  return std::visit([](const auto& i) { return ranges_of(i); }, inst);
}

// ---------------------------------------------------------------------------
// Validation

namespace {

bool valid_dtype(DType t) { return is_valid_dtype(static_cast<uint8_t>(t)); }

class Validator {
 public:
  Validator(const Program& program, const ProgramLimits& limits)
      : program_(program), limits_(limits) {}

  void run() {
    check_slots();
    check_cores();
    for (size_t c = 0; c < program_.cores.size(); ++c) {
      const CoreProgram& core = program_.cores[c];
      for (size_t i = 0; i < core.instructions.size(); ++i) {
        core_index_ = c;
        instruction_index_ = i;
        instruction_ = &core.instructions[i];
        check_instruction(core, *instruction_);
      }
    }
    instruction_ = nullptr;
    check_ring_channels();
    check_share_groups();
  }

 private:
  // Where a message points: the program, then core and instruction.
  template <typename... Args>
  [[noreturn]] void fail(Args&&... what) const {
    std::string where = str("program '", program_.name, "': ");
    if (instruction_ != nullptr) {
      where += str("core ", core_index_, ", instruction ", instruction_index_,
                   " (", instruction_name(*instruction_), "): ");
    }
    throw Error(ErrorCode::kMalformedProgram,
                where + str(std::forward<Args>(what)...));
  }
  template <typename... Args>
  void require(bool ok, Args&&... what) const {
    if (!ok) fail(std::forward<Args>(what)...);
  }

  void check_slots() const {
    for (size_t s = 0; s < program_.args.size(); ++s) {
      const ArgSlot& arg = program_.args[s];
      require(valid_dtype(arg.dtype), "argument slot ", s, " '", arg.name,
              "' has invalid dtype ", static_cast<int>(arg.dtype));
      for (int64_t d : arg.layout.device_size) {
        require(d >= 0, "argument slot ", s, " '", arg.name,
                "' has a negative device dimension ", d);
      }
    }
    for (size_t k = 0; k < program_.constants.size(); ++k) {
      const Constant& constant = program_.constants[k];
      require(valid_dtype(constant.dtype), "constant ", k, " '", constant.name,
              "' has invalid dtype ", static_cast<int>(constant.dtype));
      require(!constant.data.empty() && constant.data.size() % kStickBytes == 0,
              "constant ", k, " '", constant.name, "' holds ",
              constant.data.size(),
              " bytes; constant data must be a nonzero multiple of 128 bytes");
    }
  }

  void check_cores() {
    std::set<uint32_t> seen;
    for (size_t c = 0; c < program_.cores.size(); ++c) {
      const CoreProgram& core = program_.cores[c];
      require(core.core < limits_.num_cores, "core ", c, " runs on core id ",
              core.core, " but the device has ", limits_.num_cores, " cores");
      require(seen.insert(core.core).second, "core ", c, " uses core id ",
              core.core, " which an earlier core program already uses");
      require(core.scratchpad_bytes <= limits_.scratchpad_bytes, "core ", c,
              " declares a scratchpad footprint of ", core.scratchpad_bytes,
              " bytes, more than the device's ", limits_.scratchpad_bytes);
    }
  }

  void check_instruction(const CoreProgram& core, const Instruction& inst) {
    std::visit([this](const auto& i) { check_fields(i); }, inst);
    for (const SpadRange& range : scratchpad_ranges(inst)) {
      require(range.lo >= 0 && range.hi <= core.scratchpad_bytes,
              "scratchpad range [", range.lo, ", ", range.hi,
              ") exceeds the core's footprint of ", core.scratchpad_bytes,
              " bytes");
    }
    for (const DeviceExtent& extent : device_extents(inst)) {
      check_extent(extent);
    }
  }

  void check_extent(const DeviceExtent& e) const {
    uint64_t limit = 0;
    std::string what;
    if (e.slot < program_.args.size()) {
      limit = program_.args[e.slot].bytes;
      what =
          str("argument slot ", e.slot, " '", program_.args[e.slot].name, "'");
    } else {
      const Constant& c = program_.constants[e.slot - program_.args.size()];
      limit = c.data.size();
      what = str("constant slot ", e.slot, " '", c.name, "'");
    }
    // A saturated end (see saturate) is an access past 63-bit offsets: it
    // would pass against a slot declared as large, and its range be empty.
    require(e.hi < std::numeric_limits<int64_t>::max(), "device range of ",
            what, " overflows 63-bit byte offsets");
    require(e.lo >= 0 && static_cast<uint64_t>(e.hi) <= limit, "device range [",
            e.lo, ", ", e.hi, ") leaves ", what, " of ", limit, " bytes");
  }

  void check_slot(const SymAddr& addr, const char* field) const {
    require(addr.slot < program_.num_slots(), field, ".slot ", addr.slot,
            " is out of range: the program has ", program_.num_slots(),
            " slots");
  }

  template <typename T>
  void check_stick(T value, const char* field) const {
    require(value % kStickBytes == 0, field, " = ", value,
            " is not a multiple of 128 bytes");
  }

  void check_nonzero(uint64_t value, const char* field) const {
    require(value != 0, field, " must be nonzero");
  }

  void check_tile(const Tile& t, const char* field) const {
    require(valid_dtype(t.dtype), field, ".dtype ", static_cast<int>(t.dtype),
            " is not a valid dtype");
  }

  void check_transfer(const StickTransfer& x) const {
    check_slot(x.dram, "dram");
    check_stick(x.dram.offset, "dram.offset");
    check_stick(x.spad, "spad");
    check_stick(x.run_bytes, "run_bytes");
    check_nonzero(x.run_bytes, "run_bytes");
    check_nonzero(x.count1, "count1");
    check_nonzero(x.count2, "count2");
    check_stick(x.dram_stride1, "dram_stride1");
    check_stick(x.dram_stride2, "dram_stride2");
    check_stick(x.spad_stride1, "spad_stride1");
    check_stick(x.spad_stride2, "spad_stride2");
  }

  void check_fields(const DmaLoad& i) {
    check_transfer(i.xfer);
    if (i.xfer.share_group != 0) {
      share_groups_[i.xfer.share_group].push_back(
          {core_index_, instruction_index_, &i.xfer});
    }
  }
  void check_fields(const DmaStore& i) {
    check_transfer(i.xfer);
    require(i.xfer.share_group == 0, "share_group ", i.xfer.share_group,
            " is only valid on DmaLoad (stores cannot be shared)");
    if (i.masked()) {
      require(i.mask_begin < i.mask_end && i.mask_end <= i.xfer.run_bytes,
              "write mask [", i.mask_begin, ", ", i.mask_end,
              ") is empty or reaches past run_bytes ", i.xfer.run_bytes);
    } else {
      require(i.mask_begin == 0, "mask_begin ", i.mask_begin,
              " without a mask_end (0 means unmasked)");
    }
  }
  void check_fields(const IndexedRows& i) {
    check_slot(i.table, "table");
    check_stick(i.table.offset, "table.offset");
    check_stick(i.table_row_stride, "table_row_stride");
    check_stick(i.row_bytes, "row_bytes");
    check_nonzero(i.row_bytes, "row_bytes");
    check_nonzero(i.table_rows, "table_rows");
    check_nonzero(i.count, "count");
    check_stick(i.spad, "spad");
    check_stick(i.spad_stride, "spad_stride");
    require(i.index_dtype == DType::kInt32 || i.index_dtype == DType::kInt64,
            "index_dtype ", dtype_name(i.index_dtype),
            " must be int32 or int64");
    require(i.index_spad % element_size(i.index_dtype) == 0, "index_spad ",
            i.index_spad, " is not aligned to its ",
            element_size(i.index_dtype), "-byte indices");
  }
  void check_fields(const RingSend& i) {
    ring_[i.channel].sends.push_back(
        {core_index_, instruction_index_, i.dst_core, i.bytes});
  }
  void check_fields(const RingRecv& i) {
    ring_[i.channel].recvs.push_back(
        {core_index_, instruction_index_, i.src_core, i.bytes});
    check_transpose(i.transpose, i.spad, i.bytes);
  }
  void check_transpose(const StickTranspose& t, uint32_t spad,
                       uint32_t bytes) const {
    require(valid_dtype(t.dtype), "transpose.dtype ", static_cast<int>(t.dtype),
            " is not a valid dtype");
    if (!t.enabled()) {
      require(t.pitch == 0, "transpose.pitch ", t.pitch,
              " without transpose.cols (a plain receive has no pitch)");
      return;
    }
    check_stick(bytes, "bytes of a transposed receive");
    const uint32_t size = element_size(t.dtype);
    require(t.cols <= elements_per_stick(t.dtype), "transpose.cols ", t.cols,
            " exceeds the ", elements_per_stick(t.dtype), " ",
            dtype_name(t.dtype), " elements of a stick");
    require(t.pitch <= static_cast<uint32_t>(INT32_MAX), "transpose.pitch ",
            t.pitch, " exceeds a tile's row stride (2^31 - 1 bytes)");
    require(spad % size == 0 && t.pitch % size == 0, "transposed landing at ",
            spad, " with pitch ", t.pitch, " is not aligned to its ", size,
            "-byte elements");
    const uint64_t row_bytes = uint64_t{bytes} / kStickBytes * size;
    require(t.cols == 1 || t.pitch >= row_bytes, "transpose.pitch ", t.pitch,
            " is shorter than a landed row (", row_bytes,
            " bytes): the rows would overlap");
  }
  void check_fields(const MatMul& i) const {
    check_tile(i.a, "a");
    check_tile(i.b, "b");
    check_tile(i.c, "c");
    check_nonzero(i.m, "m");
    check_nonzero(i.n, "n");
    check_nonzero(i.k, "k");
    require(i.a.dtype == i.b.dtype, "a.dtype ", dtype_name(i.a.dtype),
            " differs from b.dtype ", dtype_name(i.b.dtype));
    bool floating = is_floating(i.a.dtype) && i.c.dtype == DType::kFloat32;
    bool integer = i.a.dtype == DType::kInt8 && i.c.dtype == DType::kInt32;
    require(floating || integer, "matrix unit cannot multiply ",
            dtype_name(i.a.dtype), " into c.dtype ", dtype_name(i.c.dtype),
            ": use fp16/bf16/fp32 with fp32 c, or int8 with int32 c");
  }
  void check_fields(const Vector& i) const {
    require(static_cast<int>(i.op) < kNumVecOps, "op ", static_cast<int>(i.op),
            " is not a valid VecOp");
    check_nonzero(i.rows, "rows");
    check_nonzero(i.cols, "cols");
    check_tile(i.dst, "dst");
    // Unused operands too: the binary format rejects any invalid dtype, so
    // a program that validates must not carry one anywhere.
    check_tile(i.src0, "src0");
    check_tile(i.src1, "src1");
    check_tile(i.src2, "src2");
    if (vec_op_is_compare(i.op)) {
      require(i.dst.dtype == DType::kBool, "dst.dtype ",
              dtype_name(i.dst.dtype), " must be bool for a comparison");
    }
    if (vec_op_is_bitwise(i.op)) {
      const int arity = vec_op_arity(i.op);
      const bool floating =
          is_floating(i.dst.dtype) || is_floating(i.src0.dtype) ||
          (arity == 2 && !i.src1_is_imm && is_floating(i.src1.dtype));
      require(!floating, "a bitwise op takes integer or bool tiles only");
      require(!(arity == 2 && i.src1_is_imm && std::trunc(i.imm) != i.imm),
              "a bitwise op's immediate must be an integer");
    }
  }
  void check_fields(const Reduce& i) const {
    require(static_cast<int>(i.op) < kNumRedOps, "op ", static_cast<int>(i.op),
            " is not a valid RedOp");
    check_nonzero(i.rows, "rows");
    check_nonzero(i.cols, "cols");
    check_tile(i.dst, "dst");
    check_tile(i.src, "src");
    bool arg = i.op == RedOp::kArgMax || i.op == RedOp::kArgMin;
    if (arg) {
      require(i.dst.dtype == DType::kInt64, "dst.dtype ",
              dtype_name(i.dst.dtype), " must be int64 for an arg reduction");
      require(!i.accumulate, "accumulate is not valid for arg reductions");
    }
  }
  void check_fields(const RandFill& i) const {
    require(static_cast<int>(i.dist) <= static_cast<int>(RandDist::kNormal),
            "dist ", static_cast<int>(i.dist), " is not a valid RandDist");
    check_nonzero(i.rows, "rows");
    check_nonzero(i.cols, "cols");
    check_tile(i.dst, "dst");
  }

  struct RingEnd {
    size_t core_index;
    size_t instruction;
    uint32_t peer;  // dst_core of a send, src_core of a receive
    uint32_t bytes;
  };
  struct Channel {
    std::vector<RingEnd> sends, recvs;
  };

  template <typename... Args>
  [[noreturn]] void fail_at(const RingEnd& end, const char* name,
                            Args&&... what) const {
    throw Error(ErrorCode::kMalformedProgram,
                str("program '", program_.name, "': core ", end.core_index,
                    ", instruction ", end.instruction, " (", name,
                    "): ", std::forward<Args>(what)...));
  }

  void check_ring_channels() const {
    for (const auto& [id, channel] : ring_) {
      if (channel.sends.size() != 1 || channel.recvs.size() != 1) {
        const RingEnd& any =
            channel.sends.empty() ? channel.recvs[0] : channel.sends[0];
        fail_at(any, channel.sends.empty() ? "RingRecv" : "RingSend",
                "ring channel ", id, " has ", channel.sends.size(),
                " sends and ", channel.recvs.size(),
                " receives; each channel needs exactly one of each");
      }
      const RingEnd& send = channel.sends[0];
      const RingEnd& recv = channel.recvs[0];
      uint32_t sender = program_.cores[send.core_index].core;
      uint32_t receiver = program_.cores[recv.core_index].core;
      if (sender == receiver) {
        fail_at(send, "RingSend", "ring channel ", id, " sends from core id ",
                sender, " to itself");
      }
      if (send.peer != receiver) {
        fail_at(send, "RingSend", "dst_core ", send.peer, " of channel ", id,
                " is not core id ", receiver, " which receives it");
      }
      if (recv.peer != sender) {
        fail_at(recv, "RingRecv", "src_core ", recv.peer, " of channel ", id,
                " is not core id ", sender, " which sends it");
      }
      if (send.bytes != recv.bytes) {
        fail_at(recv, "RingRecv", "channel ", id, " receives ", recv.bytes,
                " bytes but its send carries ", send.bytes);
      }
    }
  }

  struct ShareMember {
    size_t core_index;
    size_t instruction;
    const StickTransfer* xfer;
  };

  static bool same_source(const StickTransfer& a, const StickTransfer& b) {
    return a.dram == b.dram && a.run_bytes == b.run_bytes &&
           a.count1 == b.count1 && a.count2 == b.count2 &&
           a.dram_stride1 == b.dram_stride1 && a.dram_stride2 == b.dram_stride2;
  }

  void check_share_groups() const {
    for (const auto& [group, members] : share_groups_) {
      RingEnd first{members[0].core_index, members[0].instruction, 0, 0};
      if (members.size() > limits_.max_broadcast_cores) {
        fail_at(first, "DmaLoad", "share group ", group, " has ",
                members.size(), " members; at most ",
                limits_.max_broadcast_cores, " cores can share a read");
      }
      std::set<size_t> cores;
      for (const ShareMember& m : members) {
        RingEnd at{m.core_index, m.instruction, 0, 0};
        if (!cores.insert(m.core_index).second) {
          fail_at(at, "DmaLoad", "share group ", group,
                  " has two members on the same core");
        }
        if (!same_source(*m.xfer, *members[0].xfer)) {
          fail_at(at, "DmaLoad", "share group ", group,
                  " member reads different device bytes than core ",
                  members[0].core_index, ", instruction ",
                  members[0].instruction);
        }
      }
    }
  }

  const Program& program_;
  const ProgramLimits& limits_;
  size_t core_index_ = 0;
  size_t instruction_index_ = 0;
  const Instruction* instruction_ = nullptr;
  std::map<uint32_t, Channel> ring_;
  std::map<uint32_t, std::vector<ShareMember>> share_groups_;
};

}  // namespace

void validate(const Program& program, const ProgramLimits& limits) {
  Validator(program, limits).run();
}

}  // namespace spyre::rt
