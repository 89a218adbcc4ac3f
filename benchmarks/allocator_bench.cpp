// Allocator throughput: alloc/free pairs per second of the caching
// allocator (cache hits on one stream) against malloc/free, same run.
#include <cstdlib>
#include <vector>

#include "bench_util.h"
#include "spyre/runtime/runtime.h"

using namespace spyre;

int main(int argc, char** argv) {
  const int pairs = bench::int_flag(argc, argv, "pairs", 200000);
  const int reps = bench::int_flag(argc, argv, "reps", 7);
  rt::CachingAllocator& alloc = rt::Runtime::get().allocator(0);
  const std::vector<uint64_t> sizes = {128, 4096, 1 << 20, 16 << 20};

  bench::Report report("allocator",
                       "alloc/free pairs per second, caching allocator vs "
                       "malloc/free (median of runs)");
  report.set_meta("backend", rt::Runtime::get().backend_name());
  for (uint64_t size : sizes) {
    double t_spyre = bench::median_seconds(
        [&] {
          for (int i = 0; i < pairs; ++i) alloc.free(alloc.allocate(size));
        },
        reps);
    double t_malloc = bench::median_seconds(
        [&] {
          for (int i = 0; i < pairs; ++i) {
            void* p = std::malloc(size);
            // Keep the compiler from eliding the pair.
            asm volatile("" : : "r"(p) : "memory");
            std::free(p);
          }
        },
        reps);
    report.add({rt::str(rt::format_bytes(size), " blocks"),
                {{"spyre_pairs_per_s", pairs / t_spyre},
                 {"malloc_pairs_per_s", pairs / t_malloc},
                 {"spyre_ns_per_pair", t_spyre / pairs * 1e9},
                 {"ratio_vs_malloc", t_spyre / t_malloc}},
                ""});
  }
  report.finish(argc, argv);
  return 0;
}
