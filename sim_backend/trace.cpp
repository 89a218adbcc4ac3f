#include "trace.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "spyre/runtime/error.h"

namespace spyre::sim {
namespace {

std::mutex trace_mutex;
std::map<std::string, double> next_launch_us;  // per path, modelled time

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    out += ch;
  }
  return out;
}

std::string launch_events(const SimExecutable& exe, int device,
                          const rt::CostTable& table, double base_us) {
  std::ostringstream out;
  out.precision(12);
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  sep();
  out << R"({"name":"process_name","ph":"M","pid":)" << device
      << R"(,"args":{"name":"spyre sim device )" << device << "\"}}";
  for (const DecodedCore& core : exe.cores) {
    for (int e = 0; e < kNumEngines; ++e) {
      sep();
      out << R"({"name":"thread_name","ph":"M","pid":)" << device
          << R"(,"tid":)" << core.core * kNumEngines + e
          << R"(,"args":{"name":"core )" << core.core << " "
          << engine_name(static_cast<Engine>(e)) << "\"}}";
    }
    for (const DecodedInst& d : core.insts) {
      sep();
      double ts =
          base_us + static_cast<double>(d.start) / table.clock_ghz / 1000;
      double dur =
          static_cast<double>(d.end - d.start) / table.clock_ghz / 1000;
      out << R"({"name":")" << rt::instruction_name(d.inst) << R"(","cat":")"
          << escape(exe.name) << R"(","ph":"X","pid":)" << device
          << R"(,"tid":)"
          << core.core * kNumEngines + static_cast<int>(d.engine) << R"(,"ts":)"
          << ts << R"(,"dur":)" << dur << "}";
    }
  }
  return out.str();
}

}  // namespace

void append_trace(const std::string& path, const SimExecutable& exe, int device,
                  const rt::CostTable& table) {
  std::lock_guard lock(trace_mutex);
  // The first launch of a process starts the file; later ones replace the
  // closing bracket so the file is a valid JSON array after every launch.
  // A file removed since this process's last launch (old traces cleared)
  // starts over too, rather than failing a launch that has already run.
  bool known = next_launch_us.find(path) != next_launch_us.end();
  FILE* f = known ? std::fopen(path.c_str(), "r+") : nullptr;
  const bool fresh = f == nullptr;
  if (fresh) f = std::fopen(path.c_str(), "w");
  rt::check(f != nullptr, rt::ErrorCode::kInvalidArgument,
            "sim: cannot open SPYRE_TRACE file '", path, "' for writing");
  double& base_us = next_launch_us[path];
  if (fresh) base_us = 0;  // a new file starts its own timeline
  std::string events = launch_events(exe, device, table, base_us);
  base_us += exe.stats.time_ns / 1000;
  if (fresh) {
    std::fputs("[\n", f);
  } else {
    std::fseek(f, -2, SEEK_END);  // before "\n]"
    std::fputs(",\n", f);
  }
  std::fputs(events.c_str(), f);
  std::fputs("\n]", f);
  std::fclose(f);
}

}  // namespace spyre::sim
