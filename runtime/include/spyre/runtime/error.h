// Errors raised by the device layer. Every failure is an exception of type
// spyre::rt::Error carrying a code, so the torch glue can map codes to the
// matching Python exception (OutOfMemoryError, ValueError, RuntimeError).
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace spyre::rt {

enum class ErrorCode : uint8_t {
  kInvalidArgument,   // caller passed something the API does not accept
  kOutOfMemory,       // device memory exhausted (see OutOfMemoryError)
  kDeviceError,       // the device faulted while running work (bad access, ...)
  kMalformedProgram,  // a serialised or constructed program failed validation
  kBindError,         // patcher step 1: an argument does not match its slot
  kRelocateError,     // patcher step 2: an address could not be relocated
  kVerifyError,       // patcher step 3: a patched access leaves its allocation
  kBackendError,      // backend could not be found, loaded or created
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Raised when device memory cannot satisfy a request even after the caching
// allocator released its cache. The numbers let a caller say what to do.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& message, uint64_t requested,
                   uint64_t free_bytes, uint64_t cached_bytes)
      : Error(ErrorCode::kOutOfMemory, message),
        requested_(requested),
        free_(free_bytes),
        cached_(cached_bytes) {}
  uint64_t requested_bytes() const { return requested_; }
  uint64_t free_bytes() const { return free_; }
  uint64_t cached_bytes() const { return cached_; }

 private:
  uint64_t requested_;
  uint64_t free_;
  uint64_t cached_;
};

// Concatenates streamable values into a message: str("slot ", 3, " is bad").
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// Throws Error(code, message) when `condition` is false.
template <typename... Args>
void check(bool condition, ErrorCode code, Args&&... message) {
  if (!condition) throw Error(code, str(std::forward<Args>(message)...));
}

std::string format_bytes(uint64_t bytes);  // "1.50 GiB", "128 B"

}  // namespace spyre::rt
