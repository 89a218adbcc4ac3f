#include "ops/program_cache.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "device_state.h"
#include "ops/op_stats.h"

namespace spyre::torch_glue::ops {
namespace {

size_t device_slot(c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(device >= 0 && device < static_cast<int>(kMaxDevices),
                    "spyre: device index ", device, " out of range");
  return static_cast<size_t>(device);
}

size_t capacity_from_environment() {
  const char* text = std::getenv("SPYRE_PROGRAM_CACHE_SIZE");
  if (text == nullptr || *text == '\0') return kDefaultProgramCacheCapacity;
  char* end = nullptr;
  errno = 0;  // strtoll saturates out-of-range numbers and says so only here
  const long long value = std::strtoll(text, &end, 10);
  TORCH_CHECK_VALUE(*end == '\0' && errno != ERANGE && value > 0,
                    "spyre: SPYRE_PROGRAM_CACHE_SIZE must be a positive "
                    "number of programs that fits in 64 bits, got '",
                    text, "'");
  return static_cast<size_t>(value);
}

std::atomic<size_t>& capacity_setting() {
  static std::atomic<size_t> capacity{capacity_from_environment()};
  return capacity;
}

// `build()` loaded on `device` (both may raise: as torch errors).
LoadedProgramPtr build_and_load(c10::DeviceIndex device,
                                c10::function_ref<rt::Program()> build) {
  LoadedProgramPtr loaded = call_runtime([&] {
    return std::make_shared<const rt::LoadedProgram>(runtime_device(device),
                                                     build());
  });
  ++op_counters().program_misses;
  return loaded;
}

// Loaded programs of one device; pinned ones are never removed.
class PinnedProgramCache {
 public:
  const rt::LoadedProgram& get(c10::DeviceIndex device, const ProgramKey& key,
                               c10::function_ref<rt::Program()> build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = programs_.find(key.view());
      if (it != programs_.end()) {
        ++op_counters().program_hits;
        return *it->second;
      }
    }
    // Built and loaded outside the lock: another thread may race us to the
    // same key; the first entry wins and ours is dropped unused.
    LoadedProgramPtr loaded = build_and_load(device, build);
    std::lock_guard<std::mutex> lock(mutex_);
    return *programs_.try_emplace(key, std::move(loaded)).first->second;
  }

 private:
  std::mutex mutex_;
  KeyMap<LoadedProgramPtr> programs_;
};

// Loaded programs of one device, least recently used evicted beyond the
// capacity.
class BoundedProgramCache {
 public:
  LoadedProgramPtr find(KeyView key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    ++op_counters().program_hits;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  LoadedProgramPtr get(c10::DeviceIndex device, const ProgramKey& key,
                       c10::function_ref<rt::Program()> build) {
    if (LoadedProgramPtr found = find(key.view())) return found;
    // Built and loaded outside the lock: a racing thread's entry for the
    // same key wins and ours is dropped unused.
    LoadedProgramPtr loaded = build_and_load(device, build);
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key.view());
    if (found != index_.end()) return found->second->second;
    order_.emplace_front(key, std::move(loaded));
    // The index refers to the bytes of the key in the list entry, which
    // stays put until the entry is erased.
    index_.emplace(order_.front().first.view(), order_.begin());
    evict_beyond(capacity_setting().load());
    return order_.front().second;
  }

  void shrink_to(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    evict_beyond(capacity);
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.size();
  }

 private:
  using Entry = std::pair<ProgramKey, LoadedProgramPtr>;

  void evict_beyond(size_t capacity) {
    while (index_.size() > capacity) {
      index_.erase(order_.back().first.view());
      order_.pop_back();
      ++op_counters().program_evictions;
    }
  }

  std::mutex mutex_;
  std::list<Entry> order_;  // most recent first
  std::unordered_map<KeyView, std::list<Entry>::iterator, KeyHash, KeyEqual>
      index_;
};

std::array<BoundedProgramCache, kMaxDevices>& bounded_caches() {
  static std::array<BoundedProgramCache, kMaxDevices> caches;
  return caches;
}

}  // namespace

LoadedProgramPtr lookup_program(c10::DeviceIndex device, const ProgramKey& key,
                                c10::function_ref<rt::Program()> build) {
  return bounded_caches()[device_slot(device)].get(device, key, build);
}

LoadedProgramPtr find_program(c10::DeviceIndex device, KeyView key) {
  return bounded_caches()[device_slot(device)].find(key);
}

LoadedProgramPtr load_program(c10::DeviceIndex device, rt::Program program) {
  return build_and_load(device, [&] { return std::move(program); });
}

const rt::LoadedProgram& cached_program(
    c10::DeviceIndex device, std::string_view id,
    c10::function_ref<rt::Program()> build) {
  static std::array<PinnedProgramCache, kMaxDevices> caches;
  kernels::KeyWriter key;
  key.add(id);
  return caches[device_slot(device)].get(device, ProgramKey(std::move(key)),
                                         build);
}

size_t program_cache_capacity() { return capacity_setting().load(); }

void set_program_cache_capacity(size_t capacity) {
  TORCH_CHECK_VALUE(capacity > 0,
                    "spyre: the program cache capacity must be at least 1");
  capacity_setting().store(capacity);
  for (BoundedProgramCache& cache : bounded_caches()) cache.shrink_to(capacity);
}

size_t cached_program_count() {
  size_t count = 0;
  for (BoundedProgramCache& cache : bounded_caches()) count += cache.size();
  return count;
}

}  // namespace spyre::torch_glue::ops
