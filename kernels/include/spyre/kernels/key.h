// Program cache keys: everything a built program depends on, written as raw
// bytes. Spelling numbers as text cost more host time than the rest of a
// cached eager launch, and text rounds doubles; raw bytes are exact and
// cheap. Every value is written at its fixed width and every string or list
// after its length, so two different sequences of values of the same types
// never write the same bytes. A key therefore starts with a tag naming what
// it describes (a kernel family), which fixes the types that follow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace spyre::kernels {

class KeyWriter {
 public:
  template <typename T>
  requires(std::is_arithmetic_v<T> ||
           std::is_enum_v<T>) KeyWriter& add(T value) {
    std::memcpy(reserve(sizeof(T)), &value, sizeof(T));
    return *this;
  }
  KeyWriter& add(std::string_view text) {
    add(static_cast<uint64_t>(text.size()));
    if (!text.empty())
      std::memcpy(reserve(text.size()), text.data(), text.size());
    return *this;
  }
  KeyWriter& add(const char* text) { return add(std::string_view(text)); }
  // A list of values (a vector, an array, a span), after its length.
  template <typename Range>
  KeyWriter& add_list(const Range& values) {
    add(static_cast<uint64_t>(std::size(values)));
    using T = std::remove_cvref_t<decltype(*std::data(values))>;
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      const size_t n = std::size(values) * sizeof(T);
      if (n != 0) std::memcpy(reserve(n), std::data(values), n);
    } else {
      for (const auto& value : values) add(value);
    }
    return *this;
  }

  // Empties the key, keeping its buffer (a writer reused per launch does not
  // allocate once warm).
  void clear() { size_ = 0; }
  std::string_view bytes() const { return {buffer_.data(), size_}; }
  std::string take() && {
    buffer_.resize(size_);
    size_ = 0;
    return std::move(buffer_);
  }

 private:
  // Room for `n` more bytes at the end; the buffer's size is its capacity
  // (keys are written by many small values: one compare each, no per-value
  // bookkeeping of std::string::append).
  char* reserve(size_t n) {
    if (size_ + n > buffer_.size()) {
      buffer_.resize(std::max({2 * buffer_.size(), size_ + n, size_t{256}}));
    }
    char* at = buffer_.data() + size_;
    size_ += n;
    return at;
  }

  std::string buffer_;
  size_t size_ = 0;
};

}  // namespace spyre::kernels
