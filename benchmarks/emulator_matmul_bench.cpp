// Emulator throughput: a 1024x1024x1024 fp16 matmul program on 32 emulated
// cores, in GFLOP/s of host wall time, beside OpenBLAS sgemm (fp32) on the
// same shape in the same run. Also reports the modelled device time.
#include <cblas.h>

#include <random>
#include <vector>

#include "bench_util.h"
#include "spyre/kernels/matmul.h"
#include "spyre/runtime/half.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/runtime.h"

using namespace spyre;

int main(int argc, char** argv) {
  const int n = bench::int_flag(argc, argv, "n", 1024);
  const int reps = bench::int_flag(argc, argv, "reps", 5);
  rt::Runtime& runtime = rt::Runtime::get();
  rt::Device& device = runtime.device(0);
  rt::CachingAllocator& alloc = runtime.allocator(0);

  kernels::MatmulShape shape{
      kernels::Matrix::row_major(n, n, rt::DType::kFloat16),
      kernels::Matrix::row_major(n, n, rt::DType::kFloat16),
      kernels::Matrix::row_major(n, n, rt::DType::kFloat16)};
  kernels::MatmulOptions options;
  options.target = {device.properties().chip};
  const kernels::MatmulPlan plan = kernels::plan_matmul(shape, options);
  rt::LoadedProgram loaded(device, kernels::build_matmul(shape, plan, options));

  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1, 1);
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<float> a32(count), b32(count), c32(count);
  std::vector<uint16_t> a16(count), b16(count);
  for (size_t i = 0; i < count; ++i) {
    a16[i] = rt::float_to_fp16(dist(rng));
    b16[i] = rt::float_to_fp16(dist(rng));
    a32[i] = rt::fp16_to_float(a16[i]);
    b32[i] = rt::fp16_to_float(b16[i]);
  }
  std::vector<rt::ArgBinding> args;
  for (int i = 0; i < 3; ++i) {
    const uint64_t bytes = shape.a.bytes();
    args.push_back({alloc.allocate(bytes), bytes, rt::DType::kFloat16, {}});
  }
  device.copy_to_device(args[0].ptr, a16.data(), count * 2);
  device.copy_to_device(args[1].ptr, b16.data(), count * 2);

  rt::LaunchStats stats;
  const double t_emu =
      bench::median_seconds([&] { stats = loaded.run(args); }, reps);
  const double t_blas = bench::median_seconds(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                    a32.data(), n, b32.data(), n, 0.0f, c32.data(), n);
      },
      reps);

  // Spot-check the result against the fp32 product rounded once.
  std::vector<uint16_t> c16(count);
  device.copy_to_host(c16.data(), args[2].ptr, count * 2);
  double max_err = 0;
  for (size_t i = 0; i < count; i += 997) {
    double want = rt::fp16_to_float(rt::float_to_fp16(c32[i]));
    max_err = std::max(max_err, std::abs(rt::fp16_to_float(c16[i]) - want) /
                                    std::max(1.0, std::abs(want)));
  }

  const double flops = 2.0 * n * n * n;
  bench::Report report("emulator_matmul",
                       "host wall time of an fp16 matmul on 32 emulated cores "
                       "vs OpenBLAS sgemm on the host");
  report.set_meta("shape", rt::str(n, "x", n, "x", n));
  report.set_meta("plan", plan.describe());
  report.set_meta("timing_table",
                  std::string(device.properties().chip.costs.version));
  report.add({"emulator fp16, 32 cores",
              {{"median_ms", t_emu * 1e3}, {"gflops", flops / t_emu / 1e9}},
              ""});
  report.add({"OpenBLAS sgemm fp32",
              {{"median_ms", t_blas * 1e3}, {"gflops", flops / t_blas / 1e9}},
              ""});
  report.add({"ratio emulator / sgemm time",
              {{"ratio", t_emu / t_blas}},
              "target <= 2"});
  report.add({"modelled device time",
              {{"us", stats.time_ns / 1e3},
               {"matrix_util", stats.matrix_utilization},
               {"core_util", stats.core_utilization},
               {"dma_MiB", stats.dma_bytes / 1048576.0}},
              ""});
  report.add({"max relative error vs sgemm", {{"max_rel_err", max_err}}, ""});
  report.finish(argc, argv);
  for (auto& arg : args) alloc.free(arg.ptr);
  return 0;
}
