#include "bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace spyre::bench {

double median_seconds(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  times.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(end - start).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

ModelledRuns run_modelled(const rt::LoadedProgram& loaded,
                          const std::vector<rt::ArgBinding>& args, int reps) {
  ModelledRuns runs;
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    runs.stats = loaded.run(args);
    times.push_back(runs.stats.time_ns / 1e3);
  }
  std::sort(times.begin(), times.end());
  runs.median_us = times[times.size() / 2];
  return runs;
}

std::vector<rt::ArgBinding> zeroed_args(rt::Device& device,
                                        rt::CachingAllocator& alloc,
                                        const rt::Program& program) {
  std::vector<rt::ArgBinding> args;
  for (const rt::ArgSlot& slot : program.args) {
    args.push_back({alloc.allocate(slot.bytes), slot.bytes, slot.dtype, {}});
    device.fill(args.back().ptr, 0, slot.bytes);
  }
  return args;
}

void free_args(rt::CachingAllocator& alloc,
               const std::vector<rt::ArgBinding>& args) {
  for (const rt::ArgBinding& arg : args) alloc.free(arg.ptr);
}

Report::Report(std::string benchmark, std::string description)
    : benchmark_(std::move(benchmark)), description_(std::move(description)) {}

void Report::add(Row row) { rows_.push_back(std::move(row)); }

void Report::set_meta(const std::string& key, const std::string& value) {
  meta_.emplace_back(key, value);
}

namespace {

std::string json_string(const std::string& s) {
  std::ostringstream out;
  out << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out << "\\u" << std::hex << std::setw(4) << std::setfill('0')
          << static_cast<int>(c) << std::dec;
    } else {
      out << c;
    }
  }
  out << '"';
  return out.str();
}

std::string out_dir(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--out") return argv[i + 1];
  }
  const char* env = std::getenv("SPYRE_BENCH_OUT");
  return env != nullptr ? env : ".";
}

}  // namespace

void Report::finish(int argc, char** argv) const {
  std::cout << "\n== " << benchmark_ << ": " << description_ << "\n";
  for (const auto& [k, v] : meta_) std::cout << "   " << k << ": " << v << "\n";
  for (const Row& row : rows_) {
    std::cout << "  " << std::left << std::setw(34) << row.name;
    for (const auto& [col, value] : row.values) {
      std::cout << "  " << col << "=" << std::setprecision(4) << value;
    }
    if (!row.note.empty()) std::cout << "  (" << row.note << ")";
    std::cout << "\n";
  }
  std::filesystem::path dir = out_dir(argc, argv);
  std::filesystem::create_directories(dir);
  std::ofstream json(dir / (benchmark_ + ".json"));
  json << "{\n  \"benchmark\": " << json_string(benchmark_)
       << ",\n  \"description\": " << json_string(description_)
       << ",\n  \"meta\": {";
  for (size_t i = 0; i < meta_.size(); ++i) {
    json << (i ? ", " : "") << json_string(meta_[i].first) << ": "
         << json_string(meta_[i].second);
  }
  json << "},\n  \"rows\": [\n";
  for (size_t r = 0; r < rows_.size(); ++r) {
    const Row& row = rows_[r];
    json << "    {\"name\": " << json_string(row.name);
    for (const auto& [col, value] : row.values) {
      json << ", " << json_string(col) << ": " << std::setprecision(9) << value;
    }
    json << ", \"note\": " << json_string(row.note) << "}"
         << (r + 1 < rows_.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  std::cout << "  -> " << (dir / (benchmark_ + ".json")).string() << "\n";
}

int int_flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace spyre::bench
