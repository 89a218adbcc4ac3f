// Timing-model calibration: softmax of 512x1024 fp16 on one core, hand
// scheduled three ways, modelled times beside the published figures
// (HARDWARE.md: 32.51 us baseline with reductions through device memory,
// 27.66 us with them kept in the scratchpad, 23.67 us with the input cloned
// into the scratchpad).
//
// The resident variant is timed after the clone, so the input is already in
// the scratchpad when it starts: the assumption this model takes for the
// published variant (HARDWARE.md asks for it to be stated; the published
// figure does not say). The emulator's scratchpad does not outlive a launch, so
// the kResident program clones the input itself, and its time here is that
// launch less the same clone run as a program of its own (the softmax's
// first instruction waits for the whole clone, so the two do not overlap).
#include <vector>

#include "bench_util.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/softmax.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/runtime.h"

using namespace spyre;

namespace {

double launch_ns(rt::Device& device, rt::CachingAllocator& alloc,
                 rt::Program program) {
  rt::LoadedProgram loaded(device, std::move(program));
  const std::vector<rt::ArgBinding> args =
      bench::zeroed_args(device, alloc, loaded.program());
  const double ns = loaded.run(args).time_ns;
  bench::free_args(alloc, args);
  return ns;
}

// A launch that only clones `m` into one core's scratchpad.
rt::Program clone_program(const kernels::Matrix& m,
                          const kernels::Target& target) {
  kernels::ProgramBuilder builder("clone", 1, target.scratchpad_budget());
  builder.add_arg("input", m.dtype, m.bytes(), false);
  kernels::CoreBuilder& core = builder.core(0);
  const uint32_t pitch = kernels::padded_row_bytes(m.cols, m.dtype);
  const uint32_t at = core.reserve(m.rows * pitch, "resident input");
  core.load(m.tiles(0, 0, m.rows, 0, m.cols, at, pitch));
  return std::move(builder).finish();
}

}  // namespace

int main(int argc, char** argv) {
  rt::Runtime& runtime = rt::Runtime::get();
  rt::Device& device = runtime.device(0);
  rt::CachingAllocator& alloc = runtime.allocator(0);
  const auto m = kernels::Matrix::row_major(512, 1024, rt::DType::kFloat16);
  const kernels::Target one_core{device.properties().chip, 1};

  struct Variant {
    const char* name;
    kernels::SoftmaxSchedule schedule;
    double published_us;
  };
  const std::vector<Variant> variants = {
      {"reductions through device memory",
       kernels::SoftmaxSchedule::kStatsThroughDram, 32.51},
      {"streamed, reductions in scratchpad",
       kernels::SoftmaxSchedule::kStreamed, 27.66},
      {"input resident in scratchpad", kernels::SoftmaxSchedule::kResident,
       23.67},
  };
  bench::Report report("softmax_calibration",
                       "modelled time of 512x1024 fp16 softmax on one core vs "
                       "published device times");
  report.set_meta("timing_table",
                  std::string(device.properties().chip.costs.version));
  const double clone_ns = launch_ns(device, alloc, clone_program(m, one_core));
  const double launch_overhead_ns =
      device.properties().chip.costs.launch_overhead_ns;
  std::vector<double> modelled;
  for (const Variant& v : variants) {
    kernels::SoftmaxOptions options;
    options.target = one_core;
    options.schedule = v.schedule;
    double ns = launch_ns(device, alloc, kernels::build_softmax(m, m, options));
    if (v.schedule == kernels::SoftmaxSchedule::kResident) {
      ns -= clone_ns - launch_overhead_ns;  // the clone's own transfer time
    }
    const double us = ns / 1e3;
    modelled.push_back(us);
    report.add({v.name,
                {{"modelled_us", us},
                 {"published_us", v.published_us},
                 {"ratio", us / v.published_us}},
                "within 2x: ratio in [0.5, 2]"});
  }
  // The spread: how much faster the fastest variant is than the slowest
  // (the published ones: 27%).
  const double published_spread = 1 - 23.67 / 32.51;
  const double spread = 1 - modelled.back() / modelled.front();
  report.add({"spread (1 - fastest / slowest)",
              {{"modelled", spread}, {"published", published_spread}},
              "same ordering, spread of the same order"});
  report.finish(argc, argv);
  return 0;
}
