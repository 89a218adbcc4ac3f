#include "fallback_stats.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace spyre::torch_glue {
namespace {

std::mutex& counts_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, uint64_t>& counts() {
  static std::map<std::string, uint64_t> counts;
  return counts;
}

bool strict_from_environment() {
  const char* value = std::getenv("SPYRE_STRICT");
  return value != nullptr && std::strcmp(value, "") != 0 &&
         std::strcmp(value, "0") != 0;
}

std::atomic<bool>& strict_flag() {
  static std::atomic<bool> flag{strict_from_environment()};
  return flag;
}

}  // namespace

bool record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(counts_mutex());
  return ++counts()[op] == 1;
}

std::map<std::string, uint64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex());
  return counts();
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex());
  counts().clear();
}

bool strict_mode() { return strict_flag().load(); }
void set_strict_mode(bool strict) { strict_flag().store(strict); }

}  // namespace spyre::torch_glue
