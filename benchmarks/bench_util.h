// Shared plumbing of the C++ benchmarks: wall-clock timing with medians of
// repeated runs, the median modelled device time of repeated launches, device
// buffers for a program's arguments, a printed table, and a JSON report per
// benchmark. Ratios
// are always measured side by side in one process, because this host is
// noisy.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spyre/runtime/allocator.h"
#include "spyre/runtime/device.h"
#include "spyre/runtime/patcher.h"

namespace spyre::bench {

// Runs `fn` `warmup` times, then `reps` times, and returns the median of
// the measured wall times in seconds.
double median_seconds(const std::function<void()>& fn, int reps,
                      int warmup = 1);

// `reps` launches of a loaded program on the emulator: the median of their
// modelled device times (the model is deterministic, so every launch reports
// the same) and the last launch's statistics.
struct ModelledRuns {
  double median_us = 0;
  rt::LaunchStats stats;
};
ModelledRuns run_modelled(const rt::LoadedProgram& loaded,
                          const std::vector<rt::ArgBinding>& args, int reps);

// One zero-filled device buffer per argument slot of `program`; give them
// back with free_args.
std::vector<rt::ArgBinding> zeroed_args(rt::Device& device,
                                        rt::CachingAllocator& alloc,
                                        const rt::Program& program);
void free_args(rt::CachingAllocator& alloc,
               const std::vector<rt::ArgBinding>& args);

struct Row {
  std::string name;
  std::vector<std::pair<std::string, double>> values;  // column -> value
  std::string note;
};

class Report {
 public:
  Report(std::string benchmark, std::string description);
  void add(Row row);
  void set_meta(const std::string& key, const std::string& value);
  // Prints the table and writes <out_dir>/<benchmark>.json; out_dir comes
  // from --out DIR on the command line or $SPYRE_BENCH_OUT, else ".".
  void finish(int argc, char** argv) const;

 private:
  std::string benchmark_;
  std::string description_;
  std::vector<Row> rows_;
  std::vector<std::pair<std::string, std::string>> meta_;
};

// Value of --name N on the command line, or `fallback`.
int int_flag(int argc, char** argv, const std::string& name, int fallback);

}  // namespace spyre::bench
