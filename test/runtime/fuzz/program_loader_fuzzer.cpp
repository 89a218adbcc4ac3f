// libFuzzer entry point for the program loader: every input goes through
// deserialize, validate, the patch plan, load and launch on the fake device
// (fuzz/loader_harness.h). A broken rule throws LoaderViolation, which
// escapes and aborts, so libFuzzer keeps the input as a crash.
//
// The input's trailing checksum is rewritten before parsing: otherwise
// almost every mutation stops at the checksum and coverage never grows past
// it. The checksum check itself is covered by serialize_test.cpp.
//
// `make fuzz` (part of `make test`) builds it with clang and runs it for
// FUZZ_SECONDS from the kept corpus, test/data/program_corpus; `make
// fuzz-corpus` then keeps the inputs that found new coverage there. By hand:
//   cmake -DSPYRE_BUILD_FUZZERS=ON -DCMAKE_CXX_COMPILER=clang++ ...
//   program_loader_fuzzer -max_total_time=60 <scratch dir> \
//       test/data/program_corpus
// Only the first directory receives new inputs: keep the committed corpus
// second.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../program_samples.h"
#include "loader_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  spyre::rt::testing::reseal(bytes);
  spyre::rt::testing::check_serialized(bytes);
  return 0;
}
