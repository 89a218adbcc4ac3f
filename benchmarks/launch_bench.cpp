// Launch cost of a loaded program: 64 argument slots, 10,000 relocations.
// Compares the host time of a launch of a loaded program (bind, relocate,
// verify, publish) with a launch that rebuilds the program's load-time state
// (validation, patch plan, backend preparation) every time, as a graph-based
// launch path would. Both are measured in the same run, medians of many.
#include <algorithm>
#include <chrono>
#include <vector>

#include "bench_util.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/runtime.h"

using namespace spyre;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kSlots = 64;
constexpr uint32_t kRelocations = 10000;
constexpr uint32_t kSticksPerSlot = 160;

// Each core loads single sticks from every slot in turn: one relocation per
// load, spread over the chip's cores.
rt::Program make_program(const rt::ChipFigures& chip) {
  kernels::ProgramBuilder b("launch_bench", chip.num_cores,
                            chip.scratchpad_bytes);
  for (uint32_t s = 0; s < kSlots; ++s) {
    b.add_arg(rt::str("arg", s), rt::DType::kFloat16,
              kSticksPerSlot * rt::kStickBytes, false);
  }
  for (uint32_t i = 0; i < kRelocations; ++i) {
    kernels::CoreBuilder& core = b.core(i % chip.num_cores);
    if (core.used() == 0) core.reserve(64 * rt::kStickBytes, "landing zone");
    rt::StickTransfer x;
    x.dram = {i % kSlots, (i / kSlots) % kSticksPerSlot * rt::kStickBytes};
    x.spad = (i / chip.num_cores) % 64 * rt::kStickBytes;
    core.emit(rt::DmaLoad{x});
  }
  return std::move(b).finish();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = bench::int_flag(argc, argv, "reps", 31);
  rt::Runtime& runtime = rt::Runtime::get();
  rt::Device& device = runtime.device(0);
  rt::CachingAllocator& alloc = runtime.allocator(0);
  rt::Stream& stream = runtime.default_stream(0);

  const rt::Program program = make_program(device.properties().chip);
  std::vector<rt::ArgBinding> args;
  for (uint32_t s = 0; s < kSlots; ++s) {
    const uint64_t bytes = kSticksPerSlot * rt::kStickBytes;
    args.push_back({alloc.allocate(bytes), bytes, rt::DType::kFloat16, {}});
  }

  rt::LoadedProgram loaded(device, program);
  std::vector<double> launch_s, rebuild_s, execute_s;
  for (int i = 0; i < reps + 2; ++i) {
    auto t0 = Clock::now();
    loaded.launch(stream, args);
    auto t1 = Clock::now();
    stream.synchronize();
    auto t2 = Clock::now();
    {
      rt::LoadedProgram rebuilt(device, program);
      rebuilt.launch(stream, args);
      auto t3 = Clock::now();
      stream.synchronize();
      if (i >= 2)
        rebuild_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
    if (i >= 2) {  // the first launches warm caches
      launch_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      execute_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
  }
  const double launch = median(launch_s), rebuild = median(rebuild_s);

  bench::Report report("launch",
                       "host cost of launching a loaded program (64 slots, "
                       "10,000 relocations) vs rebuilding it per launch");
  report.set_meta("backend", runtime.backend_name());
  report.set_meta("timing_table",
                  std::string(device.properties().chip.costs.version));
  report.set_meta("relocations",
                  std::to_string(loaded.plan().relocations.size()));
  report.add({"loaded launch (bind+relocate+verify+publish)",
              {{"median_us", launch * 1e6},
               {"ns_per_relocation", launch * 1e9 / kRelocations}},
              ""});
  report.add({"rebuild + launch", {{"median_us", rebuild * 1e6}}, ""});
  report.add({"execute on the emulator (for scale)",
              {{"median_us", median(execute_s) * 1e6}},
              "not part of either launch path"});
  report.add({"ratio rebuild / loaded",
              {{"ratio", rebuild / launch}},
              "target >= 10"});
  report.finish(argc, argv);
  for (auto& a : args) alloc.free(a.ptr);
  return 0;
}
