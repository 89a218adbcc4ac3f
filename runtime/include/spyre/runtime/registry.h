// Backends are found by name. Built-in backends register a factory at static
// initialisation; an external backend is a shared library exporting
//   extern "C" spyre::rt::Backend* spyre_create_backend(uint32_t abi_version);
// which returns a new backend (owned by the caller) or null when it does not
// support `abi_version`.
//
// Selection, made once per process at first use:
//   SPYRE_BACKEND_LIBRARY=/path/libfoo.so  load that library's backend
//   SPYRE_BACKEND=name                     a registered backend by name
//   otherwise                              "sim"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spyre/runtime/device.h"

namespace spyre::rt {

inline constexpr uint32_t kBackendAbiVersion = 1;
inline constexpr const char* kBackendEntryPoint = "spyre_create_backend";

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Registers a backend under `name`; registering a name twice is an error.
void register_backend(const std::string& name, BackendFactory factory);
std::vector<std::string> registered_backends();

// Creates a backend by registry name, or loads one from a shared library.
std::unique_ptr<Backend> create_backend(const std::string& name);
std::unique_ptr<Backend> load_backend_library(const std::string& path);

// Helper for built-in backends: `static BackendRegistration reg("sim", f);`
struct BackendRegistration {
  BackendRegistration(const std::string& name, BackendFactory factory) {
    register_backend(name, std::move(factory));
  }
};

}  // namespace spyre::rt
