#include "fallback_stats.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

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

// SPYRE_STRICT as a boolean: unset or empty is off; anything but the usual
// spellings is an error at first use rather than a guess.
bool strict_from_environment() {
  const char* value = std::getenv("SPYRE_STRICT");
  if (value == nullptr || *value == '\0') return false;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw std::invalid_argument(
      "spyre: SPYRE_STRICT='" + std::string(value) +
      "' is not a boolean; use 1/0, true/false, yes/no or on/off");
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
