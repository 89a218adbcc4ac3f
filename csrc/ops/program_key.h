// Keys of the program caches and the launch memo: the bytes a
// kernels::KeyWriter wrote (kernels/key.h), hashed once when the key is
// made, so a lookup chain (memo, then program cache) never hashes twice.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "spyre/kernels/key.h"

namespace spyre::torch_glue::ops {

// Key bytes owned elsewhere, with their hash: what lookups take.
class KeyView {
 public:
  explicit KeyView(std::string_view bytes)
      : KeyView(bytes, std::hash<std::string_view>{}(bytes)) {}

  std::string_view bytes() const { return bytes_; }
  size_t hash() const { return hash_; }
  friend bool operator==(const KeyView& a, const KeyView& b) {
    return a.hash_ == b.hash_ && a.bytes_ == b.bytes_;
  }

 private:
  friend class ProgramKey;
  KeyView(std::string_view bytes, size_t hash) : bytes_(bytes), hash_(hash) {}

  std::string_view bytes_;
  size_t hash_;
};

// Key bytes owned, with their hash: what maps store.
class ProgramKey {
 public:
  explicit ProgramKey(kernels::KeyWriter&& written)
      : bytes_(std::move(written).take()), hash_(KeyView(bytes_).hash()) {}
  explicit ProgramKey(KeyView view)
      : bytes_(view.bytes()), hash_(view.hash()) {}

  KeyView view() const { return KeyView(bytes_, hash_); }
  operator KeyView() const { return view(); }  // NOLINT: lookups take both

 private:
  std::string bytes_;
  size_t hash_;
};

// Hash and equality for maps keyed by ProgramKey or KeyView, found by either
// without copying the bytes.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(KeyView key) const { return key.hash(); }
};
struct KeyEqual {
  using is_transparent = void;
  bool operator()(KeyView a, KeyView b) const { return a == b; }
};

template <typename Value>
using KeyMap = std::unordered_map<ProgramKey, Value, KeyHash, KeyEqual>;

}  // namespace spyre::torch_glue::ops
