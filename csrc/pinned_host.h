// Pinned host memory (torch-free): page-aligned host blocks, locked in RAM
// when the system allows it, and remembered so that any pointer inside a
// live block is recognised as pinned (PyTorch asks isPinnedPtr of pointers
// into the middle of blocks, e.g. for views).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace spyre::torch_glue {

class PinnedHostMemory {
 public:
  static PinnedHostMemory& get();

  void* allocate(size_t bytes);  // null for 0 bytes; throws std::bad_alloc
  void free(void* ptr);
  bool contains(const void* ptr) const;
  size_t bytes_in_use() const;
  size_t block_count() const;

 private:
  struct Block {
    size_t bytes;
    bool locked;
  };
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;  // base address -> block
  size_t bytes_in_use_ = 0;
};

}  // namespace spyre::torch_glue
