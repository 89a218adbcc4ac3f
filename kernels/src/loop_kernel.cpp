// Loop kernels (loop_kernel.h): the description's checks and names, and the
// work division: row blocks sized so their scratchpad regions fit (double
// buffered when two do), spread over the cores; or a full reduction spread
// over the cores with a ring combine.
#include "spyre/kernels/loop_kernel.h"

#include <algorithm>
#include <array>
#include <functional>
#include <iterator>
#include <variant>

#include "loop_kernel_internal.h"
#include "spyre/kernels/formulas.h"
#include "spyre/kernels/reduce.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {

namespace {

constexpr std::array<std::pair<LoopRole, std::string_view>, 4> kRoleNames{{
    {LoopRole::kOuter, "outer"},
    {LoopRole::kRow, "row"},
    {LoopRole::kCol, "col"},
    {LoopRole::kReduced, "reduced"},
}};

constexpr std::array<std::pair<LoopOpKind, std::string_view>, 9> kKindNames{{
    {LoopOpKind::kLoad, "load"},
    {LoopOpKind::kConstant, "constant"},
    {LoopOpKind::kIndex, "index"},
    {LoopOpKind::kToDtype, "to_dtype"},
    {LoopOpKind::kUnary, "unary"},
    {LoopOpKind::kBinary, "binary"},
    {LoopOpKind::kSelect, "select"},
    {LoopOpKind::kReduction, "reduction"},
    {LoopOpKind::kRandom, "random"},
}};

// The VecOp names of the description (as torch_spyre._C.VecOp spells them).
constexpr std::array<std::pair<rt::VecOp, std::string_view>, 42> kVecOpNames{{
    {rt::VecOp::kCopy, "copy"},
    {rt::VecOp::kNeg, "neg"},
    {rt::VecOp::kAbs, "abs"},
    {rt::VecOp::kExp, "exp"},
    {rt::VecOp::kLog, "log"},
    {rt::VecOp::kSqrt, "sqrt"},
    {rt::VecOp::kRsqrt, "rsqrt"},
    {rt::VecOp::kRecip, "recip"},
    {rt::VecOp::kTanh, "tanh"},
    {rt::VecOp::kSigmoid, "sigmoid"},
    {rt::VecOp::kRelu, "relu"},
    {rt::VecOp::kGelu, "gelu"},
    {rt::VecOp::kGeluTanh, "gelu_tanh"},
    {rt::VecOp::kSilu, "silu"},
    {rt::VecOp::kErf, "erf"},
    {rt::VecOp::kSin, "sin"},
    {rt::VecOp::kCos, "cos"},
    {rt::VecOp::kLogicalNot, "logical_not"},
    {rt::VecOp::kFloor, "floor"},
    {rt::VecOp::kBitNot, "bitwise_not"},
    {rt::VecOp::kAdd, "add"},
    {rt::VecOp::kSub, "sub"},
    {rt::VecOp::kMul, "mul"},
    {rt::VecOp::kDiv, "div"},
    {rt::VecOp::kMax, "max"},
    {rt::VecOp::kMin, "min"},
    {rt::VecOp::kPow, "pow"},
    {rt::VecOp::kEq, "eq"},
    {rt::VecOp::kNe, "ne"},
    {rt::VecOp::kLt, "lt"},
    {rt::VecOp::kLe, "le"},
    {rt::VecOp::kGt, "gt"},
    {rt::VecOp::kGe, "ge"},
    {rt::VecOp::kLogicalAnd, "logical_and"},
    {rt::VecOp::kLogicalOr, "logical_or"},
    {rt::VecOp::kRemainder, "remainder"},
    {rt::VecOp::kBitAnd, "bitwise_and"},
    {rt::VecOp::kBitOr, "bitwise_or"},
    {rt::VecOp::kBitXor, "bitwise_xor"},
    {rt::VecOp::kSelect, "select"},
    {rt::VecOp::kFill, "fill"},
    {rt::VecOp::kIota, "iota"},
}};

template <typename Enum, size_t N>
std::optional<Enum> from_name(
    const std::array<std::pair<Enum, std::string_view>, N>& names,
    std::string_view name) {
  for (const auto& [value, n] : names) {
    if (n == name) return value;
  }
  return std::nullopt;
}

template <typename Enum, size_t N>
std::string_view to_name(
    const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
  for (const auto& [v, n] : names) {
    if (v == value) return n;
  }
  return "?";
}

void check(bool ok, const LoopKernel& k, const std::string& what) {
  if (!ok) {
    throw KernelBuildError(
        rt::str(k.name, ": malformed loop kernel description: ", what));
  }
}

void check_access(const LoopKernel& k, const LoopBuffer& b,
                  const BufferAccess& a, uint32_t node, const char* what) {
  check(a.base.size() == b.rank(), k,
        rt::str(what, " of ", b.name, " has ", a.base.size(),
                " base coordinates for ", b.rank(), " dims"));
  for (const AccessVar& v : a.vars) {
    check(v.dim < b.rank(), k,
          rt::str(what, " of ", b.name, " walks dim ", v.dim));
    check(v.role != LoopRole::kOuter || v.index < k.outer.size(), k,
          rt::str(what, " of ", b.name, " uses outer var ", v.index));
    check(v.role != LoopRole::kReduced ||
              v.index < k.nodes[node].reduced_outer.size(),
          k, rt::str(what, " of ", b.name, " uses reduced var ", v.index));
  }
}

// The stored buffers whose stick dim the row var walks: row blocks must
// cover whole sticks of them (else two cores would write one stick), unless
// they share their sticks (stores masked to their own elements).
std::vector<std::string> quantum_buffers(const LoopKernel& k) {
  std::vector<std::string> names;
  if (!k.rows) return names;
  std::map<std::string, const LoopStore*> last;  // a buffer's last store
  for (const LoopStore& st : k.stores) {
    if (st.access) last[st.buffer] = &st;
  }
  for (const auto& [name, st] : last) {
    const LoopBuffer* b = loop::find_buffer(k, name, nullptr);
    const AccessVar* m = st->access->find(LoopRole::kRow);
    if (!b->shares_sticks && m != nullptr && m->dim == b->rank() - 1 &&
        m->step % b->per_stick()) {
      names.push_back(name);
    }
  }
  return names;
}

int64_t row_quantum(const LoopKernel& k) {
  int64_t q = 1;
  for (const std::string& name : quantum_buffers(k)) {
    q = std::max<int64_t>(q, loop::find_buffer(k, name, nullptr)->per_stick());
  }
  return q;
}

// Few rows in blocks of whole sticks leave cores idle (a sum over 64 rows of
// fp16 stores one stick of results: one core does all the work). Then the
// buffers that set the quantum share their sticks instead: each core's
// block writes its own elements of them, its stores masked. nullopt when
// whole-stick blocks already reach `cores` cores.
std::optional<LoopKernel> split_sticks_among_cores(const LoopKernel& k,
                                                   int64_t cores) {
  const int64_t q = row_quantum(k);
  const int64_t rows = k.row_count();
  if (q == 1 || (rows + q - 1) / q >= std::min(cores, rows)) {
    return std::nullopt;
  }
  LoopKernel split = k;
  for (const std::string& name : quantum_buffers(k)) {
    for (LoopBuffer& b : split.buffers) {
      if (b.name == name) b.shares_sticks = true;
    }
  }
  return split;
}

// Cores a full reduction (no kept dims) spreads its first reduced dim over,
// combining partials over the ring; 1 when it runs on one core.
uint32_t ring_cores(const LoopKernel& k, uint32_t num_cores) {
  if (!k.outer.empty() || k.rows || k.nodes.size() != 1 ||
      k.nodes[0].reduced_outer.empty() || k.stores.size() != 1) {
    return 1;
  }
  std::vector<bool> seen(k.ops.size(), false);
  std::vector<uint32_t> reductions;
  std::function<void(uint32_t)> walk = [&](uint32_t op) {
    if (seen[op]) return;
    seen[op] = true;
    if (k.ops[op].kind == LoopOpKind::kReduction) reductions.push_back(op);
    for (uint32_t a : k.ops[op].args) walk(a);
  };
  walk(k.stores[0].value);
  if (reductions.size() != 1) return 1;
  const std::string& type = k.ops[reductions[0]].name;
  if (type != "sum" && type != "max" && type != "min" && type != "prod") {
    return 1;
  }
  return static_cast<uint32_t>(
      std::min<int64_t>(num_cores, k.nodes[0].reduced_outer[0]));
}

// A core's blocks in program order, software-pipelined: the DMA engine runs
// its transfers in program order, so a block's final stores, emitted before
// the next block's first loads, would hold those loads until the block's
// compute is done. With two regions the next block's leading loads go
// first (they fill the other region), then the previous block's stores.
class BlockPipeline {
 public:
  BlockPipeline(CoreBuilder& out, bool overlap)
      : out_(out), overlap_(overlap) {}

  void add(std::vector<rt::Instruction> block) {
    auto first = block.begin(), last = block.end();
    if (overlap_) {
      while (first != last && std::holds_alternative<rt::DmaLoad>(*first)) {
        ++first;
      }
      while (last != first &&
             std::holds_alternative<rt::DmaStore>(*std::prev(last))) {
        --last;
      }
    }
    emit(block.begin(), first);  // this block's leading loads
    emit(pending_.begin(), pending_.end());
    emit(first, last);
    pending_.assign(std::make_move_iterator(last),
                    std::make_move_iterator(block.end()));
  }
  void finish() {
    emit(pending_.begin(), pending_.end());
    pending_.clear();
  }

 private:
  template <typename It>
  void emit(It begin, It end) {
    for (It it = begin; it != end; ++it) out_.emit(std::move(*it));
  }

  CoreBuilder& out_;
  bool overlap_;
  std::vector<rt::Instruction> pending_;  // the previous block's last stores
};

// Loads that may be made once per core when their box does not move from
// block to block: reachable from a store, the first of the ops computing
// their value, of a buffer the kernel never writes, and not moving with the
// reduced-outer vars of a reduction over several dims.
std::vector<uint32_t> block_invariant_loads(const LoopKernel& k) {
  const std::vector<uint32_t> canonical = loop::share_equal_values(k);
  std::vector<bool> reachable(k.ops.size(), false);
  std::function<void(uint32_t)> mark = [&](uint32_t op) {
    op = canonical[op];
    if (reachable[op]) return;
    reachable[op] = true;
    for (uint32_t a : k.ops[op].args) mark(a);
  };
  for (const LoopStore& st : k.stores) mark(st.value);
  std::vector<uint32_t> loads;
  for (uint32_t id = 0; id < k.ops.size(); ++id) {
    const LoopOp& op = k.ops[id];
    const bool written = std::any_of(
        k.stores.begin(), k.stores.end(),
        [&](const LoopStore& st) { return st.buffer == op.buffer; });
    if (op.kind == LoopOpKind::kLoad && op.access && reachable[id] &&
        canonical[id] == id && !written &&
        k.nodes[op.node].reduced_outer.empty()) {
      loads.push_back(id);
    }
  }
  return loads;
}

bool same_box(const loop::Box& a, const loop::Box& b) {
  return a.bytes == b.bytes && a.transfers == b.transfers &&
         a.elem_offset == b.elem_offset && a.row_stride == b.row_stride &&
         a.col_stride == b.col_stride && a.has_rows == b.has_rows &&
         a.has_cols == b.has_cols;
}

ProgramBuilder program_for(const LoopKernel& k, const Target& target) {
  ProgramBuilder program(k.name, target.chip.num_cores,
                         target.chip.scratchpad_bytes);
  for (const LoopBuffer& b : k.buffers) {
    program.add_arg(b.name, b.dtype, b.device_bytes, b.is_output,
                    b.device_size);
  }
  return program;
}

LoopKernelProgram build_ring_reduction(const LoopKernel& k,
                                       const Target& target, uint32_t ncores,
                                       uint64_t budget) {
  ProgramBuilder program = program_for(k, target);
  const int64_t n0 = k.nodes[0].reduced_outer[0];
  std::vector<uint32_t> cores(ncores);
  for (uint32_t c = 0; c < ncores; ++c) cores[c] = c;
  uint64_t peak = 0;
  for (uint32_t core : cores) {
    const loop::RingSplit split{core * n0 / ncores, (core + 1) * n0 / ncores,
                                core, cores};
    for (bool dry : {true, false}) {
      loop::RegionAllocator alloc;
      CoreBuilder* out = nullptr;
      if (!dry) {
        out = &program.core(core);
        out->reserve(static_cast<uint32_t>(peak), "a reduction block");
      }
      loop::BlockEmitter em(k, out, 0, alloc);
      em.set_ring_split(split);
      em.block({}, 0, 1, 1);
      if (dry) {
        peak = alloc.peak();
        if (peak > budget) {
          throw LoopKernelTooLarge(rt::str(k.name, ": a reduction block needs ",
                                           peak, " bytes of scratchpad, ",
                                           budget, " available"));
        }
      }
    }
  }
  LoopKernelProgram result{std::move(program).finish(), {}};
  rt::validate(result.program, target.limits());
  result.summary = {
      ncores, ncores, 1, peak, false, result.program.instruction_count(), true};
  return result;
}

}  // namespace

const AccessVar* BufferAccess::find(LoopRole role, uint32_t index) const {
  for (const AccessVar& v : vars) {
    if (v.role == role && v.index == index) return &v;
  }
  return nullptr;
}

std::optional<LoopRole> loop_role_from_name(std::string_view name) {
  return from_name(kRoleNames, name);
}
std::string_view loop_op_kind_name(LoopOpKind kind) {
  return to_name(kKindNames, kind);
}
std::optional<LoopOpKind> loop_op_kind_from_name(std::string_view name) {
  return from_name(kKindNames, name);
}

std::string_view vec_op_name(rt::VecOp op) { return to_name(kVecOpNames, op); }

namespace loop {

std::optional<rt::VecOp> vec_op_from_name(std::string_view name) {
  return from_name(kVecOpNames, name);
}

const LoopBuffer* find_buffer(const LoopKernel& kernel, const std::string& name,
                              uint32_t* slot) {
  for (size_t i = 0; i < kernel.buffers.size(); ++i) {
    if (kernel.buffers[i].name != name) continue;
    if (slot != nullptr) *slot = static_cast<uint32_t>(i);
    return &kernel.buffers[i];
  }
  return nullptr;
}

}  // namespace loop

void validate_loop_kernel(const LoopKernel& k) {
  check(!k.nodes.empty(), k, "no nodes");
  for (const LoopBuffer& b : k.buffers) {
    check(
        b.host_sizes.size() == b.dim_stride_bytes.size(), k,
        rt::str("buffer ", b.name, " has ", b.host_sizes.size(),
                " host sizes but ", b.dim_stride_bytes.size(), " dim strides"));
    check(b.offset_bytes % rt::kStickBytes == 0, k,
          rt::str("buffer ", b.name, " starts ", b.offset_bytes,
                  " bytes into its slot, not at a stick"));
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const LoopOp& op = k.ops[i];
    const std::string what = rt::str("op ", i);
    check(op.node < k.nodes.size(), k, what + " belongs to no node");
    for (uint32_t a : op.args) {
      check(a < i, k, what + " uses an op that is not earlier");
    }
    size_t arity = 0;
    switch (op.kind) {
      case LoopOpKind::kToDtype:
      case LoopOpKind::kUnary:
      case LoopOpKind::kReduction:
        arity = 1;
        break;
      case LoopOpKind::kBinary:
        arity = 2;
        break;
      case LoopOpKind::kSelect:
        arity = 3;
        break;
      default:
        break;
    }
    check(op.args.size() >= arity, k,
          rt::str(what, " (", loop_op_kind_name(op.kind), ") has ",
                  op.args.size(), " args, needs ", arity));
    const bool needs_dtype =
        op.kind == LoopOpKind::kConstant || op.kind == LoopOpKind::kBinary ||
        op.kind == LoopOpKind::kSelect || op.kind == LoopOpKind::kRandom;
    check(!needs_dtype || op.dtype.has_value(), k, what + " has no dtype");
    check(op.kind != LoopOpKind::kRandom || op.name == "uniform" ||
              op.name == "normal",
          k, what + " draws from no known distribution");
    if (op.kind == LoopOpKind::kLoad && op.access) {
      const LoopBuffer* b = loop::find_buffer(k, op.buffer, nullptr);
      check(b != nullptr, k, what + " loads " + op.buffer + ", not a slot");
      check_access(k, *b, *op.access, op.node, "a load");
    }
  }
  for (const LoopStore& st : k.stores) {
    check(st.node < k.nodes.size() && st.value < k.ops.size(), k,
          "a store of " + st.buffer + " names no node or op");
    if (!st.access) continue;
    const LoopBuffer* b = loop::find_buffer(k, st.buffer, nullptr);
    check(b != nullptr, k, "a store into " + st.buffer + ", not a slot");
    check_access(k, *b, *st.access, st.node, "a store");
  }
}

LoopKernelProgram build_loop_kernel(const LoopKernel& described,
                                    const LoopKernelOptions& options) {
  validate_loop_kernel(described);
  const std::optional<LoopKernel> expanded = expand_formulas(described);
  const Target& target = options.target;
  const uint32_t num_cores = target.cores();
  int64_t n_outer = 1;
  for (int64_t n : described.outer) n_outer *= n;
  const int64_t cores_for_rows = std::max<int64_t>(1, num_cores / n_outer);
  const std::optional<LoopKernel> split = split_sticks_among_cores(
      expanded ? *expanded : described, cores_for_rows);
  const LoopKernel& k = split ? *split : expanded ? *expanded : described;
  const uint32_t reserve = target.chip.scratchpad_reserve;
  const uint64_t budget = target.scratchpad_budget();
  const int64_t q = row_quantum(k);
  const int64_t rows = k.row_count();
  int64_t rc = (rows + cores_for_rows - 1) / cores_for_rows;
  rc = std::min(rows, (rc + q - 1) / q * q);
  // the largest row block (a multiple of q) whose regions fit, double
  // buffered when possible
  bool double_buffer = options.double_buffer;
  const loop::Fixed first{std::vector<int64_t>(k.outer.size(), 0), {}};
  uint64_t need = 0;
  while (true) {
    loop::RegionAllocator alloc;
    loop::BlockEmitter(k, nullptr, 0, alloc).block(first, 0, rc, rc);
    need = alloc.peak();
    if (double_buffer && 2 * need <= budget) break;
    if (need <= budget && (rc <= q || rc == 1 || !double_buffer)) {
      double_buffer = false;
      break;
    }
    if (rc <= q || rc == 1) {
      throw LoopKernelTooLarge(rt::str(
          k.name, ": a block of ", rc, " row(s) x ", k.col_count(),
          " column(s) needs ", need, " bytes of scratchpad per core but ",
          budget, " are available (",
          rt::format_bytes(target.chip.scratchpad_bytes), " minus the ",
          reserve / 1024,
          " KiB reserve); the kernel cannot be lowered without splitting its "
          "reduced/column dim"));
    }
    rc = q > 1 ? std::max(q, (rc / 2 + q - 1) / q * q)
               : std::max<int64_t>(1, rc / 2);
  }
  const uint64_t region = need;
  const uint32_t ring = ring_cores(k, num_cores);
  if (ring > 1) return build_ring_reduction(k, target, ring, budget);

  struct Unit {
    loop::Fixed fixed;
    int64_t r0, R;
    std::optional<int64_t> K;
  };
  std::vector<Unit> units;
  const int64_t full_rows =
      k.col_tail && *k.col_tail != k.col_count() ? rows - 1 : rows;
  std::vector<int64_t> combo(k.outer.size(), 0);
  const auto add_units = [&] {
    for (int64_t r0 = 0; r0 < full_rows; r0 += rc) {
      units.push_back({{combo, {}}, r0, std::min(rc, full_rows - r0), {}});
    }
    if (full_rows < rows) {  // the last chunk of a split row is shorter
      units.push_back({{combo, {}}, full_rows, 1, k.col_tail});
    }
  };
  // every combination of the outer vars, the last varying fastest
  std::function<void(size_t)> walk_outer = [&](size_t d) {
    if (d == k.outer.size()) return add_units();
    for (combo[d] = 0; combo[d] < k.outer[d]; ++combo[d]) walk_outer(d + 1);
  };
  walk_outer(0);
  ProgramBuilder program = program_for(k, target);
  const uint64_t ncores = std::min<uint64_t>(num_cores, units.size());
  const std::vector<uint32_t> invariant = block_invariant_loads(k);
  for (uint64_t core = 0; core < ncores; ++core) {
    const uint64_t lo = core * units.size() / ncores;
    const uint64_t hi = (core + 1) * units.size() / ncores;
    const uint64_t regions = double_buffer && hi - lo > 1 ? 2 : 1;
    CoreBuilder& out = program.core(static_cast<uint32_t>(core));
    out.reserve(static_cast<uint32_t>(regions * region), "the block regions");
    // an operand every block of this core reads alike is loaded once
    std::vector<loop::ResidentLoad> resident;
    if (hi - lo > 1) {
      for (const uint32_t op : invariant) {
        const LoopOp& load = k.ops[op];
        uint32_t slot = 0;
        const LoopBuffer& buffer = *loop::find_buffer(k, load.buffer, &slot);
        const auto box_of = [&](const Unit& u) {
          return loop::make_box(k, buffer, slot, *load.access, u.fixed, u.r0,
                                u.R, u.K.value_or(k.col_count()));
        };
        loop::Box box = box_of(units[lo]);
        const bool same = std::all_of(
            units.begin() + lo + 1, units.begin() + hi,
            [&](const Unit& u) { return same_box(box, box_of(u)); });
        if (!same || out.used() + box.bytes > budget) continue;
        const uint32_t spad =
            out.reserve(static_cast<uint32_t>(box.bytes), "a resident operand");
        for (rt::StickTransfer x : box.transfers) {
          x.spad += spad;
          out.emit(rt::DmaLoad{x});
        }
        resident.push_back({op, spad, std::move(box)});
      }
    }
    BlockPipeline pipeline(out, regions == 2);
    for (uint64_t i = lo; i < hi; ++i) {
      const Unit& u = units[i];
      loop::RegionAllocator alloc;
      CoreBuilder block(out.core(), 0);
      loop::BlockEmitter emitter(k, &block, ((i - lo) % regions) * region,
                                 alloc);
      emitter.set_resident(&resident);
      emitter.block(u.fixed, u.r0, u.R, rc, u.K);
      pipeline.add(std::move(block).finish().instructions);
    }
    pipeline.finish();
  }
  LoopKernelProgram result{std::move(program).finish(), {}};
  rt::validate(result.program, target.limits());
  result.summary = {static_cast<uint32_t>(ncores),
                    units.size(),
                    rc,
                    region,
                    double_buffer,
                    result.program.instruction_count(),
                    false};
  return result;
}

}  // namespace spyre::kernels
