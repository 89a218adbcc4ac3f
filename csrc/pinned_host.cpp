#include "pinned_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

namespace spyre::torch_glue {
namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

size_t round_to_pages(size_t bytes) {
  const size_t page = page_size();
  return (bytes + page - 1) / page * page;
}

}  // namespace

PinnedHostMemory& PinnedHostMemory::get() {
  static auto* memory = new PinnedHostMemory();  // leaked: outlives tensors
  return *memory;
}

void* PinnedHostMemory::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = round_to_pages(bytes);
  void* ptr = std::aligned_alloc(page_size(), rounded);
  if (ptr == nullptr) throw std::bad_alloc();
  // Locking can fail under RLIMIT_MEMLOCK; the block is still usable and
  // still counts as pinned for PyTorch's purposes (asynchronous copies).
  const bool locked = mlock(ptr, rounded) == 0;
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_[reinterpret_cast<uintptr_t>(ptr)] = Block{rounded, locked};
  bytes_in_use_ += rounded;
  return ptr;
}

void PinnedHostMemory::free(void* ptr) {
  if (ptr == nullptr) return;
  Block block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) return;
    block = it->second;
    bytes_in_use_ -= block.bytes;
    blocks_.erase(it);
  }
  if (block.locked) munlock(ptr, block.bytes);
  std::free(ptr);
}

bool PinnedHostMemory::contains(const void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return false;
  --it;
  return address < it->first + it->second.bytes;
}

size_t PinnedHostMemory::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_in_use_;
}

size_t PinnedHostMemory::block_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.size();
}

}  // namespace spyre::torch_glue
