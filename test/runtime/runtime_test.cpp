// Runtime selection and the per-device context. Runtime::get() chooses its
// backend once per process, so each scenario runs in a fresh child process:
// the parent test re-executes this binary with the scenario's environment and
// a --gtest_filter naming one RuntimeInChild test. Those are DISABLED_ so a
// normal run leaves them out, and skip themselves unless started as a child.
#include "spyre/runtime/runtime.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "spyre/runtime/error.h"
#include "spyre/runtime/registry.h"

extern char** environ;

namespace spyre::rt {
namespace {

constexpr const char* kScenarioVar = "SPYRE_RUNTIME_TEST_SCENARIO";
constexpr const char* kDoneFileVar = "SPYRE_RUNTIME_TEST_DONE_FILE";

// Runs RuntimeInChild.DISABLED_<scenario> in a child process with `env` set
// (and every SPYRE_BACKEND* variable of this process removed). True when the
// child test ran to completion and passed.
bool run_scenario(const std::string& scenario,
                  const std::map<std::string, std::string>& env) {
  const std::string done_file = ::testing::TempDir() + "spyre_runtime_" +
                                scenario + "_" + std::to_string(getpid());
  std::remove(done_file.c_str());
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("SPYRE_BACKEND", 0) != 0) vars.emplace_back(*e);
  }
  for (const auto& [key, value] : env) vars.push_back(key + "=" + value);
  vars.push_back(std::string(kScenarioVar) + "=" + scenario);
  vars.push_back(std::string(kDoneFileVar) + "=" + done_file);
  std::vector<std::string> args = {
      "/proc/self/exe", "--gtest_filter=RuntimeInChild.DISABLED_" + scenario,
      "--gtest_also_run_disabled_tests", "--gtest_brief=1"};
  auto pointers = [](std::vector<std::string>& strings) {
    std::vector<char*> out;
    for (auto& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  };
  std::vector<char*> argv = pointers(args);
  std::vector<char*> envp = pointers(vars);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) !=
      0) {
    ADD_FAILURE() << "could not start the child process";
    return false;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream done(done_file);
  std::string marker;
  done >> marker;
  std::remove(done_file.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child scenario " << scenario << " failed (status " << status << ")";
  EXPECT_EQ(marker, "passed")
      << "child scenario " << scenario << " did not run to the end";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && marker == "passed";
}

// In a child: true when this process was started for `scenario`.
bool in_scenario(const char* scenario) {
  const char* wanted = std::getenv(kScenarioVar);
  return wanted && std::string(wanted) == scenario;
}

// In a child: tells the parent the scenario ran to its end without failing.
void report_done() {
  if (::testing::Test::HasFailure()) return;
  std::ofstream(std::getenv(kDoneFileVar)) << "passed";
}

#define SPYRE_CHILD_ONLY(scenario)                                    \
  if (!in_scenario(scenario)) {                                       \
    GTEST_SKIP() << "runs only as a child of RuntimeSelection tests"; \
  }

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

// ---- parents -------------------------------------------------------------

TEST(RuntimeSelection, BackendLibraryFromTheEnvironment) {
  EXPECT_TRUE(run_scenario(
      "PluginLibrary", {{"SPYRE_BACKEND_LIBRARY", SPYRE_TEST_PLUGIN_PATH}}));
}

TEST(RuntimeSelection, LibraryWinsOverABackendName) {
  EXPECT_TRUE(run_scenario("LibraryOverName",
                           {{"SPYRE_BACKEND_LIBRARY", SPYRE_TEST_PLUGIN_PATH},
                            {"SPYRE_BACKEND", "no-such-backend"}}));
}

TEST(RuntimeSelection, BackendByRegisteredName) {
  EXPECT_TRUE(
      run_scenario("ByName", {{"SPYRE_BACKEND", "runtime-test-named"}}));
}

TEST(RuntimeSelection, DefaultIsSimAndItsAbsenceIsReported) {
  EXPECT_TRUE(run_scenario("DefaultSim", {}));
}

TEST(RuntimeSelection, BadLibraryIsReportedAtFirstUse) {
  EXPECT_TRUE(run_scenario("BadLibrary",
                           {{"SPYRE_BACKEND_LIBRARY", "/nonexistent/lib.so"}}));
}

// ---- children ------------------------------------------------------------

TEST(RuntimeInChild, DISABLED_PluginLibrary) {
  SPYRE_CHILD_ONLY("PluginLibrary");
  Runtime& runtime = Runtime::get();
  EXPECT_EQ(runtime.backend_name(), "minimal");
  EXPECT_EQ(runtime.device_count(), 2);
  EXPECT_EQ(runtime.device(1).properties().backend, "minimal");
  EXPECT_EQ(runtime.device(1).properties().index, 1);
  for (int bad : {-1, 2}) {
    Error error = error_of([&] { runtime.device(bad); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("out of range"),
              std::string::npos);
    EXPECT_EQ(error_of([&] { runtime.allocator(bad); }).code(),
              ErrorCode::kInvalidArgument);
  }

  // The choice is made once: changing the environment later changes nothing.
  setenv("SPYRE_BACKEND_LIBRARY", "/nonexistent/lib.so", 1);
  EXPECT_EQ(&Runtime::get(), &runtime);
  EXPECT_EQ(Runtime::get().backend_name(), "minimal");

  // Streams: 0 is the default, new ones get dense ids and stay put.
  Stream& default_stream = runtime.default_stream(0);
  EXPECT_EQ(default_stream.id(), 0u);
  EXPECT_EQ(runtime.stream_count(0), 1u);
  Stream& first = runtime.create_stream(0);
  Stream& second = runtime.create_stream(0);
  EXPECT_EQ(first.id(), 1u);
  EXPECT_EQ(second.id(), 2u);
  EXPECT_EQ(&runtime.stream(0, 2), &second);
  EXPECT_EQ(&runtime.stream(0, 0), &default_stream);
  EXPECT_EQ(&default_stream.device(), &runtime.device(0));
  EXPECT_EQ(runtime.stream_count(0), 3u);
  EXPECT_EQ(runtime.stream_count(1), 1u);  // per device
  EXPECT_EQ(error_of([&] { runtime.stream(0, 3); }).code(),
            ErrorCode::kInvalidArgument);

  // Each device has its own allocator over its own memory.
  CachingAllocator& alloc0 = runtime.allocator(0);
  CachingAllocator& alloc1 = runtime.allocator(1);
  EXPECT_NE(&alloc0, &alloc1);
  DevicePtr ptr = alloc0.allocate(1000, &first);
  EXPECT_EQ(alloc0.find(ptr).bytes, 1024u);
  EXPECT_EQ(alloc1.find(ptr).bytes, 0u);
  alloc0.free(ptr);

  // Launch stats are kept per device.
  EXPECT_EQ(runtime.last_launch_stats(0).cycles, 0u);
  LaunchStats stats;
  stats.cycles = 1234;
  stats.dma_bytes = 4096;
  runtime.record_launch_stats(0, stats);
  EXPECT_EQ(runtime.last_launch_stats(0).cycles, 1234u);
  EXPECT_EQ(runtime.last_launch_stats(0).dma_bytes, 4096u);
  EXPECT_EQ(runtime.last_launch_stats(1).cycles, 0u);

  // synchronize(device) waits for every stream and reports a failure.
  std::atomic<int> ran{0};
  for (Stream* s : {&default_stream, &first, &second}) {
    s->enqueue([&ran] {
      ++ran;
      return 0.0;
    });
  }
  first.enqueue([]() -> double {
    throw Error(ErrorCode::kDeviceError, "stream 1 faulted");
  });
  EXPECT_EQ(error_of([&] { runtime.synchronize(0); }).code(),
            ErrorCode::kDeviceError);
  EXPECT_EQ(ran.load(), 3);
  EXPECT_NO_THROW(runtime.synchronize(0));
  report_done();
}

TEST(RuntimeInChild, DISABLED_LibraryOverName) {
  SPYRE_CHILD_ONLY("LibraryOverName");
  EXPECT_EQ(Runtime::get().backend_name(), "minimal");
  report_done();
}

class NamedBackend : public Backend {
 public:
  std::string name() const override { return "runtime-test-named"; }
  int device_count() const override { return 0; }
  std::unique_ptr<Device> create_device(int) override { return nullptr; }
};

TEST(RuntimeInChild, DISABLED_ByName) {
  SPYRE_CHILD_ONLY("ByName");
  register_backend("runtime-test-named",
                   [] { return std::make_unique<NamedBackend>(); });
  EXPECT_EQ(Runtime::get().backend_name(), "runtime-test-named");
  EXPECT_EQ(Runtime::get().device_count(), 0);
  EXPECT_EQ(error_of([] { Runtime::get().device(0); }).code(),
            ErrorCode::kInvalidArgument);
  report_done();
}

TEST(RuntimeInChild, DISABLED_DefaultSim) {
  SPYRE_CHILD_ONLY("DefaultSim");
  // runtime_tests never links the emulator, so "sim" is not registered here.
  Error error = error_of([] { Runtime::get(); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_NE(std::string(error.what()).find("'sim'"), std::string::npos)
      << error.what();
  // A failed first use is not cached: once "sim" exists, get() succeeds.
  register_backend("sim", [] { return std::make_unique<NamedBackend>(); });
  EXPECT_EQ(Runtime::get().backend_name(), "runtime-test-named");
  report_done();
}

TEST(RuntimeInChild, DISABLED_BadLibrary) {
  SPYRE_CHILD_ONLY("BadLibrary");
  Error error = error_of([] { Runtime::get(); });
  EXPECT_EQ(error.code(), ErrorCode::kBackendError);
  EXPECT_NE(std::string(error.what()).find("/nonexistent/lib.so"),
            std::string::npos)
      << error.what();
  report_done();
}

}  // namespace
}  // namespace spyre::rt
