// The backend registry and the external plugin backend.
#include "spyre/runtime/registry.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "spyre/runtime/allocator.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The error `call` raises; fails the test if it raises none.
template <typename Call>
Error error_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "expected a spyre::rt::Error";
  return Error(ErrorCode::kInvalidArgument, "");
}

// A shared library that surely exists and is no backend: the runtime itself.
std::string runtime_library_path() {
  Dl_info info{};
  EXPECT_NE(dladdr(reinterpret_cast<void*>(&registered_backends), &info), 0);
  return info.dli_fname ? info.dli_fname : "";
}

// Registrations last for the process, so tests register each name once
// (they may run repeatedly in one process, e.g. with --gtest_repeat).
void register_once(const std::string& name, BackendFactory factory) {
  auto names = registered_backends();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    register_backend(name, std::move(factory));
  }
}

class CountingBackend : public Backend {
 public:
  std::string name() const override { return "counting"; }
  int device_count() const override { return 0; }
  std::unique_ptr<Device> create_device(int) override { return nullptr; }
};

TEST(Registry, LoadsThePluginLibrary) {
  std::unique_ptr<Backend> backend =
      load_backend_library(SPYRE_TEST_PLUGIN_PATH);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "minimal");
  EXPECT_EQ(backend->device_count(), 2);
  std::unique_ptr<Device> device = backend->create_device(1);
  EXPECT_EQ(device->properties().backend, "minimal");
  EXPECT_EQ(device->properties().index, 1);

  // The plugin's device works with the runtime's own services.
  CachingAllocator alloc(*device);
  Stream stream(*device, 0);
  DevicePtr ptr = alloc.allocate(256, &stream);
  std::vector<uint8_t> in(256), out(256, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i);
  stream.enqueue([&] { return device->copy_to_device(ptr, in.data(), 256); });
  stream.enqueue([&] { return device->copy_to_host(out.data(), ptr, 256); });
  stream.synchronize();
  EXPECT_EQ(in, out);
  EXPECT_DOUBLE_EQ(stream.device_time_ns(), 512.0);
  alloc.free(ptr);
}

TEST(Registry, ThePluginRefusesProgramsWithAClearError) {
  std::unique_ptr<Backend> backend =
      load_backend_library(SPYRE_TEST_PLUGIN_PATH);
  std::unique_ptr<Device> device = backend->create_device(0);
  Program program;
  program.name = "add_one";
  Error error = error_of([&] { LoadedProgram loaded(*device, program); });
  EXPECT_EQ(error.code(), ErrorCode::kDeviceError);
  EXPECT_TRUE(contains(error.what(), "runs no programs")) << error.what();
  EXPECT_TRUE(contains(error.what(), "'add_one'")) << error.what();
}

TEST(Registry, PluginRefusesAnUnknownAbiVersion) {
  void* handle = dlopen(SPYRE_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  using EntryPoint = Backend* (*)(uint32_t);
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kBackendEntryPoint));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(kBackendAbiVersion + 1), nullptr);
  std::unique_ptr<Backend> ok(entry(kBackendAbiVersion));
  EXPECT_NE(ok, nullptr);
  // The handle stays open: the registry keeps plugin libraries loaded too.
}

TEST(Registry, BadLibraryPathIsABackendError) {
  Error error =
      error_of([] { load_backend_library("/nonexistent/libnothing_here.so"); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_TRUE(contains(error.what(), "cannot load spyre backend library"))
      << error.what();
  EXPECT_TRUE(contains(error.what(), "/nonexistent/libnothing_here.so"));
  EXPECT_EQ(error_of([] { load_backend_library(""); }).code(),
            ErrorCode::kBackendError);
}

TEST(Registry, LibraryWithoutTheEntryPointIsABackendError) {
  const std::string path = runtime_library_path();
  ASSERT_FALSE(path.empty());
  Error error = error_of([&] { load_backend_library(path); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_TRUE(contains(error.what(), "is not a spyre backend library"))
      << error.what();
  EXPECT_TRUE(contains(error.what(), kBackendEntryPoint));
  EXPECT_TRUE(contains(error.what(), path));
}

TEST(Registry, CreatesARegisteredBackendByName) {
  static std::atomic<int> created{0};
  register_once("registry-test-counting", [] {
    ++created;
    return std::make_unique<CountingBackend>();
  });
  const int before = created.load();
  auto names = registered_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry-test-counting"),
            names.end());
  std::unique_ptr<Backend> backend = create_backend("registry-test-counting");
  EXPECT_EQ(backend->name(), "counting");
  create_backend("registry-test-counting");
  EXPECT_EQ(created.load() - before, 2);  // a factory call per creation
}

TEST(Registry, RegisteringANameTwiceRaises) {
  auto factory = [] { return std::make_unique<CountingBackend>(); };
  register_once("registry-test-dup", factory);
  Error error =
      error_of([&] { register_backend("registry-test-dup", factory); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_TRUE(
      contains(error.what(), "'registry-test-dup' is already registered"))
      << error.what();
  EXPECT_EQ(error_of([&] { register_backend("", factory); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      error_of([] { register_backend("registry-test-null", nullptr); }).code(),
      ErrorCode::kInvalidArgument);
}

TEST(Registry, UnknownNameListsTheRegisteredBackends) {
  register_once("registry-test-listed",
                [] { return std::make_unique<CountingBackend>(); });
  Error error = error_of([] { create_backend("no-such-backend"); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_TRUE(contains(error.what(), "'no-such-backend'")) << error.what();
  EXPECT_TRUE(contains(error.what(), "registry-test-listed")) << error.what();
  EXPECT_TRUE(contains(error.what(), "SPYRE_BACKEND_LIBRARY"));
}

TEST(Registry, FactoryReturningNothingIsABackendError) {
  register_once("registry-test-empty",
                [] { return std::unique_ptr<Backend>(); });
  EXPECT_EQ(error_of([] { create_backend("registry-test-empty"); }).code(),
            ErrorCode::kBackendError);
}

}  // namespace
}  // namespace spyre::rt
