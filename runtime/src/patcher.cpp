// The patch plan and the three launch steps: bind, relocate, verify.
#include "spyre/runtime/patcher.h"

#include <limits>
#include <utility>

#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {

namespace {

// The symbolic address behind an instruction's single device access (every
// instruction has at most one; device_extents gives its extent).
const SymAddr* device_address(const Instruction& inst) {
  if (auto* load = std::get_if<DmaLoad>(&inst)) return &load->xfer.dram;
  if (auto* store = std::get_if<DmaStore>(&inst)) return &store->xfer.dram;
  if (const IndexedRows* rows = indexed_rows_of(inst)) return &rows->table;
  return nullptr;
}

std::string layout_string(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return out + "]";
}

}  // namespace

PatchPlan make_patch_plan(const Program& program) {
  PatchPlan plan;
  plan.slot_lo.assign(program.num_slots(), std::numeric_limits<int64_t>::max());
  plan.slot_hi.assign(program.num_slots(), std::numeric_limits<int64_t>::min());
  for (size_t c = 0; c < program.cores.size(); ++c) {
    const auto& instructions = program.cores[c].instructions;
    for (size_t i = 0; i < instructions.size(); ++i) {
      const SymAddr* addr = device_address(instructions[i]);
      for (const DeviceExtent& extent : device_extents(instructions[i])) {
        plan.relocations.push_back({static_cast<uint32_t>(c),
                                    static_cast<uint32_t>(i), extent.slot,
                                    addr->offset, extent.lo, extent.hi});
        if (extent.slot < program.num_slots()) {
          plan.slot_lo[extent.slot] =
              std::min(plan.slot_lo[extent.slot], extent.lo);
          plan.slot_hi[extent.slot] =
              std::max(plan.slot_hi[extent.slot], extent.hi);
        }
      }
    }
  }
  return plan;
}

LoadedProgram::LoadedProgram(Device& device, Program program)
    : device_(device), program_(std::move(program)) {
  validate(program_, device_.properties().limits());
  try {
    for (const Constant& constant : program_.constants) {
      DevicePtr ptr = device_.allocate(constant.data.size());
      constant_ptrs_.push_back(ptr);
      device_.copy_to_device(ptr, constant.data.data(), constant.data.size());
    }
    plan_ = make_patch_plan(program_);
    executable_ = device_.prepare(program_, plan_);
  } catch (...) {
    for (DevicePtr ptr : constant_ptrs_) device_.free(ptr);
    throw;
  }
}

LoadedProgram::~LoadedProgram() {
  executable_.reset();
  for (DevicePtr ptr : constant_ptrs_) device_.free(ptr);
}

void LoadedProgram::bind(std::span<const ArgBinding> args) const {
  const std::string& name = program_.name;
  check(args.size() == program_.args.size(), ErrorCode::kBindError, "program '",
        name, "' expects ", program_.args.size(), " arguments, got ",
        args.size());
  for (size_t s = 0; s < args.size(); ++s) {
    const ArgSlot& slot = program_.args[s];
    const ArgBinding& arg = args[s];
    check(arg.ptr != 0, ErrorCode::kBindError, "program '", name,
          "': argument slot ", s, " '", slot.name,
          "' is bound to a null device pointer");
    check(arg.dtype == slot.dtype, ErrorCode::kBindError, "program '", name,
          "': argument slot ", s, " '", slot.name, "' expects dtype ",
          dtype_name(slot.dtype), ", got ", dtype_name(arg.dtype));
    check(arg.bytes >= slot.bytes, ErrorCode::kBindError, "program '", name,
          "': argument slot ", s, " '", slot.name, "' expects at least ",
          slot.bytes, " bytes, got an allocation of ", arg.bytes, " bytes");
    // Formatted only on failure: bind runs on every launch.
    if (!slot.layout.device_size.empty() &&
        slot.layout.device_size != arg.device_size) {
      throw Error(ErrorCode::kBindError,
                  str("program '", name, "': argument slot ", s, " '",
                      slot.name, "' expects device layout ",
                      layout_string(slot.layout.device_size), ", got ",
                      layout_string(arg.device_size)));
    }
  }
}

void LoadedProgram::relocate(std::span<const ArgBinding> args,
                             std::vector<DevicePtr>& addresses) const {
  const size_t num_args = program_.args.size();
  check(args.size() == num_args, ErrorCode::kRelocateError, "program '",
        program_.name, "' expects ", num_args, " arguments, got ", args.size());
  addresses.resize(plan_.relocations.size());
  for (size_t r = 0; r < plan_.relocations.size(); ++r) {
    const Relocation& reloc = plan_.relocations[r];
    DevicePtr base = reloc.slot < num_args
                         ? args[reloc.slot].ptr
                         : constant_ptrs_[reloc.slot - num_args];
    check(reloc.offset <= std::numeric_limits<DevicePtr>::max() - base,
          ErrorCode::kRelocateError, "program '", program_.name,
          "': relocation ", r, " (core ", reloc.core_index, ", instruction ",
          reloc.instruction, ") of slot ", reloc.slot, ": base ", base,
          " + offset ", reloc.offset, " overflows the address space");
    addresses[r] = base + reloc.offset;
  }
}

void LoadedProgram::verify(std::span<const ArgBinding> args,
                           std::span<const DevicePtr> addresses) const {
  const size_t num_args = program_.args.size();
  check(addresses.size() == plan_.relocations.size() && args.size() == num_args,
        ErrorCode::kVerifyError, "program '", program_.name, "': got ",
        addresses.size(), " addresses and ", args.size(),
        " arguments, expected ", plan_.relocations.size(), " and ", num_args);
  __extension__ typedef __int128 Wide;
  for (size_t r = 0; r < addresses.size(); ++r) {
    const Relocation& reloc = plan_.relocations[r];
    bool is_arg = reloc.slot < num_args;
    DevicePtr begin =
        is_arg ? args[reloc.slot].ptr : constant_ptrs_[reloc.slot - num_args];
    uint64_t size = is_arg
                        ? args[reloc.slot].bytes
                        : program_.constants[reloc.slot - num_args].data.size();
    // The access spans [address - offset + lo, address - offset + hi).
    Wide base = static_cast<Wide>(addresses[r]) - reloc.offset;
    Wide lo = base + reloc.lo;
    Wide hi = base + reloc.hi;
    bool inside =
        lo >= static_cast<Wide>(begin) && hi <= static_cast<Wide>(begin) + size;
    if (!inside) {
      std::string slot_name =
          is_arg ? program_.args[reloc.slot].name
                 : program_.constants[reloc.slot - num_args].name;
      throw Error(
          ErrorCode::kVerifyError,
          str("program '", program_.name, "': relocation ", r, " (core ",
              reloc.core_index, ", instruction ", reloc.instruction,
              ") of slot ", reloc.slot, " '", slot_name, "' accesses [",
              static_cast<int64_t>(lo - begin), ", ",
              static_cast<int64_t>(hi - begin),
              ") relative to its allocation of ", size, " bytes"));
    }
  }
  const uint32_t scratchpad = device_.properties().chip.scratchpad_bytes;
  for (size_t c = 0; c < program_.cores.size(); ++c) {
    check(program_.cores[c].scratchpad_bytes <= scratchpad,
          ErrorCode::kVerifyError, "program '", program_.name, "': core ", c,
          " needs a scratchpad footprint of ",
          program_.cores[c].scratchpad_bytes, " bytes but the device has ",
          scratchpad);
  }
}

std::vector<DevicePtr> LoadedProgram::checked_addresses(
    std::span<const ArgBinding> args) const {
  bind(args);
  std::vector<DevicePtr> addresses;
  relocate(args, addresses);
  verify(args, addresses);
  return addresses;
}

template <typename Ref>
void LoadedProgram::enqueue(Ref program, Stream& stream,
                            std::span<const ArgBinding> args,
                            std::function<void(const LaunchStats&)> on_done) {
  std::vector<DevicePtr> addresses = program->checked_addresses(args);
  stream.enqueue([program = std::move(program),
                  addresses = std::move(addresses),
                  on_done = std::move(on_done)]() {
    LaunchStats stats =
        program->device_.execute(*program->executable_, addresses);
    if (on_done) on_done(stats);
    return stats.time_ns;
  });
}

void LoadedProgram::launch(std::shared_ptr<const LoadedProgram> program,
                           Stream& stream, std::span<const ArgBinding> args,
                           std::function<void(const LaunchStats&)> on_done) {
  enqueue(std::move(program), stream, args, std::move(on_done));
}

void LoadedProgram::launch(
    Stream& stream, std::span<const ArgBinding> args,
    std::function<void(const LaunchStats&)> on_done) const {
  enqueue(this, stream, args, std::move(on_done));
}

LaunchStats LoadedProgram::run(std::span<const ArgBinding> args) const {
  return device_.execute(*executable_, checked_addresses(args));
}

}  // namespace spyre::rt
