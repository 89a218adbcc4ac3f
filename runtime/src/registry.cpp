// The backend registry: built-in factories by name, and shared libraries
// that export the C entry point.
#include "spyre/runtime/registry.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

// A function-local static: built-in backends register during static
// initialisation of their libraries, before any namespace-scope object here
// is guaranteed to exist.
Registry& registry() {
  static Registry instance;
  return instance;
}

std::string joined_names(const std::vector<std::string>& names) {
  if (names.empty()) return "(none)";
  std::string out;
  for (const std::string& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

using EntryPoint = Backend* (*)(uint32_t);

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  check(!name.empty(), ErrorCode::kInvalidArgument,
        "register_backend: a backend needs a non-empty name");
  check(static_cast<bool>(factory), ErrorCode::kInvalidArgument,
        "register_backend: backend '", name, "' has no factory");
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  const bool inserted = reg.factories.emplace(name, std::move(factory)).second;
  check(inserted, ErrorCode::kBackendError, "a backend named '", name,
        "' is already registered; each backend name must be unique (is the "
        "backend library linked or loaded twice?)");
}

std::vector<std::string> registered_backends() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : reg.factories) names.push_back(name);
  return names;
}

std::unique_ptr<Backend> create_backend(const std::string& name) {
  BackendFactory factory;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto it = reg.factories.find(name);
    if (it != reg.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw Error(ErrorCode::kBackendError,
                str("no spyre backend named '", name,
                    "' is registered; registered backends: ",
                    joined_names(registered_backends()),
                    ". Set SPYRE_BACKEND to one of them, or "
                    "SPYRE_BACKEND_LIBRARY to the path of a shared library "
                    "exporting ",
                    kBackendEntryPoint, "."));
  }
  std::unique_ptr<Backend> backend = factory();
  check(backend != nullptr, ErrorCode::kBackendError,
        "the factory of backend '", name, "' returned no backend");
  return backend;
}

std::unique_ptr<Backend> load_backend_library(const std::string& path) {
  check(!path.empty(), ErrorCode::kBackendError,
        "load_backend_library: the library path is empty");
  dlerror();  // clear any stale message
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw Error(ErrorCode::kBackendError,
                str("cannot load spyre backend library '", path,
                    "': ", why ? why : "unknown dlopen error",
                    ". Check SPYRE_BACKEND_LIBRARY names an existing shared "
                    "library built for this machine."));
  }
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kBackendEntryPoint));
  if (!entry) {
    dlclose(handle);
    throw Error(ErrorCode::kBackendError,
                str("'", path,
                    "' is not a spyre backend library: it does "
                    "not export extern \"C\" ",
                    kBackendEntryPoint, "(uint32_t abi_version)"));
  }
  Backend* raw = nullptr;
  try {
    raw = entry(kBackendAbiVersion);
  } catch (const std::exception& error) {
    throw Error(ErrorCode::kBackendError, str(kBackendEntryPoint, " of '", path,
                                              "' failed: ", error.what()));
  }
  check(raw != nullptr, ErrorCode::kBackendError, "backend library '", path,
        "' does not support backend ABI version ", kBackendAbiVersion, " (its ",
        kBackendEntryPoint, " returned null); rebuild it against this runtime");
  // The library stays loaded for the life of the process: the backend, its
  // devices and their queues all run code from it, and devices may outlive
  // the backend object.
  return std::unique_ptr<Backend>(raw);
}

}  // namespace spyre::rt
