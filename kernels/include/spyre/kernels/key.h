// Program cache keys: everything a built program depends on, written as raw
// bytes. Spelling numbers as text cost more host time than the rest of a
// cached eager launch, and text rounds doubles; raw bytes are exact and
// cheap. Every value is written at its fixed width and every string or list
// after its length, so two different sequences of values of the same types
// never write the same bytes. A key therefore starts with a tag naming what
// it describes (a kernel family), which fixes the types that follow.
#pragma once

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
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes_.append(raw, sizeof(T));
    return *this;
  }
  KeyWriter& add(std::string_view text) {
    add(static_cast<uint64_t>(text.size()));
    bytes_.append(text);
    return *this;
  }
  KeyWriter& add(const char* text) { return add(std::string_view(text)); }
  // A list of values (a vector, an array, a span), after its length.
  template <typename Range>
  KeyWriter& add_list(const Range& values) {
    add(static_cast<uint64_t>(std::size(values)));
    for (const auto& value : values) add(value);
    return *this;
  }

  // Empties the key, keeping its buffer (a writer reused per launch does not
  // allocate once warm).
  void clear() { bytes_.clear(); }
  std::string_view bytes() const { return bytes_; }
  std::string take() && { return std::move(bytes_); }

 private:
  std::string bytes_;
};

}  // namespace spyre::kernels
