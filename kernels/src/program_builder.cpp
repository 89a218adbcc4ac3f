#include "spyre/kernels/program_builder.h"

#include <algorithm>

#include "spyre/runtime/error.h"

namespace spyre::kernels {

uint32_t Target::cores() const {
  if (chip.num_cores == 0 || chip.scratchpad_bytes <= chip.scratchpad_reserve) {
    throw KernelBuildError(
        "no device to plan for: set the builder's target chip from the "
        "device's properties (rt::DeviceProperties::chip)");
  }
  return max_cores == 0 ? chip.num_cores : std::min(max_cores, chip.num_cores);
}

uint32_t Target::scratchpad_budget() const {
  cores();  // checks that a chip was given
  return chip.scratchpad_budget();
}

CoreBuilder::CoreBuilder(uint32_t core, uint32_t scratchpad_limit)
    : limit_(scratchpad_limit) {
  program_.core = core;
}

uint32_t CoreBuilder::reserve(uint32_t bytes, const char* what) {
  uint64_t rounded = rt::round_up_to_sticks(bytes);
  if (next_ + rounded > limit_) {
    throw KernelBuildError(
        rt::str("core ", program_.core, ": ", what, " needs ",
                rt::format_bytes(rounded), " of scratchpad but only ",
                rt::format_bytes(limit_ - next_), " of ",
                rt::format_bytes(limit_), " is left; use smaller tiles"));
  }
  uint32_t offset = next_;
  next_ += static_cast<uint32_t>(rounded);
  return offset;
}

void CoreBuilder::load(const std::vector<rt::StickTransfer>& transfers,
                       uint32_t share_group) {
  for (rt::StickTransfer x : transfers) {
    x.share_group = share_group;
    emit(rt::DmaLoad{x});
  }
}

void CoreBuilder::store(const std::vector<rt::StickTransfer>& transfers) {
  for (const rt::StickTransfer& x : transfers) emit(rt::DmaStore{x});
}

rt::CoreProgram CoreBuilder::finish() && {
  program_.scratchpad_bytes = std::max<uint32_t>(next_, rt::kStickBytes);
  return std::move(program_);
}

ProgramBuilder::ProgramBuilder(std::string name, uint32_t num_cores,
                               uint32_t scratchpad_bytes)
    : num_cores_(num_cores), scratchpad_bytes_(scratchpad_bytes) {
  program_.name = std::move(name);
}

uint32_t ProgramBuilder::add_arg(std::string name, rt::DType dtype,
                                 uint64_t bytes, bool is_output,
                                 std::vector<int64_t> device_size) {
  rt::ArgSlot slot;
  slot.name = std::move(name);
  slot.dtype = dtype;
  slot.bytes = bytes;
  slot.is_output = is_output;
  slot.layout.device_size = std::move(device_size);
  program_.args.push_back(std::move(slot));
  return static_cast<uint32_t>(program_.args.size() - 1);
}

CoreBuilder& ProgramBuilder::core(uint32_t id) {
  rt::check(id < num_cores_, rt::ErrorCode::kInvalidArgument, "core ", id,
            " out of range: the device has ", num_cores_, " cores");
  auto it = cores_.find(id);
  if (it == cores_.end()) {
    it = cores_.emplace(id, CoreBuilder(id, scratchpad_bytes_)).first;
  }
  return it->second;
}

rt::Program ProgramBuilder::finish() && {
  for (auto& [id, core] : cores_) {
    program_.cores.push_back(std::move(core).finish());
  }
  return std::move(program_);
}

uint64_t Split::chunk() const {
  uint64_t raw = ceil_div(n, parts);
  return ceil_div(raw, quantum) * quantum;
}

uint64_t Split::begin(uint32_t i) const { return std::min(n, i * chunk()); }

uint32_t Split::used_parts() const {
  return n == 0 ? 0 : static_cast<uint32_t>(ceil_div(n, chunk()));
}

}  // namespace spyre::kernels
