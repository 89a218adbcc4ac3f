// The binary program format: round trips, the header, every way a file can
// be broken (truncation, byte flips, bad lengths, enums, version, checksum)
// and a seeded mutation fuzz over the committed corpus.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fake_device.h"
#include "program_samples.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/program.h"

namespace spyre::rt {
namespace {

using testing::reseal;
using testing::sample_program;

const ProgramLimits kLimits = testing::test_limits();

std::filesystem::path corpus_dir() {
  return std::filesystem::path(SPYRE_TEST_DATA_DIR) / "program_corpus";
}

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Expects deserialize to fail with kMalformedProgram and `fragment`.
void expect_rejected(const std::vector<uint8_t>& bytes,
                     const std::string& fragment) {
  try {
    deserialize(bytes, kLimits);
    ADD_FAILURE() << "accepted; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message was: " << e.what();
  }
}

// A mutated input must either be rejected as malformed or parse into a
// program that validates and round-trips. Returns true when it parsed.
bool parses_or_is_rejected_cleanly(const std::vector<uint8_t>& bytes) {
  Program p;
  try {
    p = deserialize(bytes, kLimits);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram) << e.what();
    return false;
  }
  EXPECT_NO_THROW(validate(p, kLimits));
  // Compared as bytes: a mutated immediate can be a NaN, which no Program
  // compares equal to, itself included.
  const std::vector<uint8_t> bytes_of_p = serialize(p);
  EXPECT_EQ(serialize(deserialize(bytes_of_p, kLimits)), bytes_of_p);
  return true;
}

void put_u32(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

TEST(Serialize, RoundTripsEveryInstructionType) {
  std::vector<bool> seen(std::variant_size_v<Instruction>, false);
  for (const auto& [name, p] : testing::corpus_programs()) {
    for (const CoreProgram& core : p.cores) {
      for (const Instruction& inst : core.instructions) {
        seen[inst.index()] = true;
      }
    }
    EXPECT_EQ(deserialize(serialize(p), kLimits), p) << name;
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_TRUE(seen[i]) << "no corpus program has instruction type " << i;
  }
}

TEST(Serialize, RoundTripsCorpusAndEmptyPrograms) {
  for (const auto& [name, program] : testing::corpus_programs()) {
    EXPECT_EQ(deserialize(serialize(program), kLimits), program) << name;
  }
  Program empty;
  EXPECT_EQ(deserialize(serialize(empty), kLimits), empty);
}

TEST(Serialize, HeaderIsMagicThenLittleEndianVersion) {
  std::vector<uint8_t> bytes = serialize(sample_program());
  ASSERT_GT(bytes.size(), 16u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "SPYREPRG");
  EXPECT_EQ(bytes[8], kProgramFormatVersion);
  EXPECT_EQ(bytes[9], 0);
  EXPECT_EQ(bytes[10], 0);
  EXPECT_EQ(bytes[11], 0);
  // The name follows, length-prefixed.
  EXPECT_EQ(bytes[12], 6);
  EXPECT_EQ(std::string(bytes.begin() + 16, bytes.begin() + 22), "sample");
  EXPECT_EQ(testing::test_crc32(
                std::span<const uint8_t>(bytes).first(bytes.size() - 4)),
            uint32_t{bytes[bytes.size() - 4]} |
                uint32_t{bytes[bytes.size() - 3]} << 8 |
                uint32_t{bytes[bytes.size() - 2]} << 16 |
                uint32_t{bytes[bytes.size() - 1]} << 24);
}

TEST(Deserialize, RejectsWrongMagicVersionAndChecksum) {
  const std::vector<uint8_t> good = serialize(sample_program());
  auto magic = good;
  magic[0] = 'X';
  reseal(magic);
  expect_rejected(magic, "bad magic");
  auto version = good;
  version[8] = static_cast<uint8_t>(kProgramFormatVersion + 1);
  reseal(version);
  expect_rejected(version, "unsupported format version " +
                               std::to_string(kProgramFormatVersion + 1));
  auto checksum = good;
  // Indexed, not back(): GCC 12 at -O3 misreads back() on a copy as an
  // out-of-bounds write (-Wstringop-overflow).
  checksum[checksum.size() - 1] ^= 0x01;
  expect_rejected(checksum, "checksum mismatch");
  expect_rejected({}, "truncated");
  expect_rejected(std::vector<uint8_t>(good.begin(), good.begin() + 15),
                  "truncated");
}

TEST(Deserialize, RejectsHugeLengthsBeforeAllocating) {
  const std::vector<uint8_t> good = serialize(sample_program());
  auto name = good;
  put_u32(name, 12, 0xFFFFFFFFu);
  reseal(name);
  expect_rejected(name, "byte offset 12: string length 4294967295");
  auto args = good;
  put_u32(args, 22, 0xFFFFFFFFu);  // the argument count, after "sample"
  reseal(args);
  expect_rejected(args, "byte offset 22: vector length 4294967295");
  auto many = good;
  put_u32(many, 22, 1u << 20);
  reseal(many);
  expect_rejected(many, "vector length 1048576");
}

TEST(Deserialize, RejectsUnknownEnumValues) {
  Program dtype = sample_program();
  dtype.args[0].dtype = static_cast<DType>(99);
  expect_rejected(serialize(dtype), "unknown dtype value 99");
  Program op = sample_program();
  std::get<Vector>(op.cores[0].instructions[4]).op = static_cast<VecOp>(200);
  expect_rejected(serialize(op), "unknown VecOp value 200");
  Program red = sample_program();
  std::get<Reduce>(red.cores[0].instructions[7]).op = static_cast<RedOp>(6);
  expect_rejected(serialize(red), "unknown RedOp value 6");
  Program dist = sample_program();
  std::get<RandFill>(dist.cores[0].instructions[8]).dist =
      static_cast<RandDist>(5);
  expect_rejected(serialize(dist), "unknown RandDist value 5");
}

TEST(Deserialize, RejectsUnknownInstructionTypeAndBadBool) {
  // copy_program's last bytes before the checksum: the store's 56-byte
  // transfer and its write mask (two u32); the byte before is its type.
  std::vector<uint8_t> bytes = serialize(testing::copy_program());
  size_t type_at = bytes.size() - 4 - 8 - 56 - 1;
  ASSERT_EQ(bytes[type_at], 1);  // DmaStore
  constexpr size_t kUnknown = std::variant_size_v<Instruction>;
  bytes[type_at] = kUnknown;
  reseal(bytes);
  expect_rejected(bytes,
                  "unknown instruction type " + std::to_string(kUnknown));

  // The last argument's is_output flag sits right before the constants
  // count and core vector; in copy_program that is arg 1 'dst'.
  Program p = testing::copy_program();
  auto good = serialize(p);
  // Find "dst" and step over it: name, u8 dtype, u64 bytes, u32 dims.
  std::string text(good.begin(), good.end());
  size_t flag_at = text.find("dst") + 3 + 1 + 8 + 4;
  ASSERT_EQ(good[flag_at], 1);
  good[flag_at] = 2;
  reseal(good);
  expect_rejected(good, "boolean byte 2 is not 0 or 1");
}

TEST(Deserialize, RejectsTrailingBytes) {
  std::vector<uint8_t> bytes = serialize(sample_program());
  bytes.insert(bytes.end() - 4, 0);
  reseal(bytes);
  expect_rejected(bytes, "1 trailing bytes after the program");
}

TEST(Deserialize, ValidatesAgainstTheLimits) {
  const std::vector<uint8_t> bytes = serialize(sample_program());
  EXPECT_NO_THROW(deserialize(bytes, kLimits));
  try {
    deserialize(bytes, ProgramLimits{4, 2u << 20, 8});
    FAIL() << "core id 5 accepted on a 4-core device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram);
    EXPECT_NE(std::string(e.what()).find("core id 5"), std::string::npos);
  }
  Program bad = sample_program();
  std::get<DmaLoad>(bad.cores[0].instructions[0]).xfer.dram.offset = 64;
  expect_rejected(serialize(bad), "dram.offset = 64");
}

TEST(Deserialize, TruncationAtEveryOffsetIsRejected) {
  const std::vector<uint8_t> good = serialize(sample_program());
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> prefix(good.begin(), good.begin() + n);
    EXPECT_THROW(deserialize(prefix, kLimits), Error) << n;
    // With a valid checksum the parser itself must notice the cut.
    std::vector<uint8_t> cut(good.begin(),
                             good.begin() + std::min(n, good.size() - 4));
    cut.resize(cut.size() + 4);
    reseal(cut);
    if (cut.size() < good.size()) {
      try {
        deserialize(cut, kLimits);
        ADD_FAILURE() << "resealed truncation at " << n << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram);
      }
    }
  }
}

TEST(Deserialize, EverySingleByteFlipIsRejectedOrValid) {
  const std::vector<uint8_t> good = serialize(sample_program());
  int parsed = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      auto bytes = good;
      bytes[at] ^= mask;
      EXPECT_THROW(deserialize(bytes, kLimits), Error) << at;  // checksum
      reseal(bytes);
      parsed += parses_or_is_rejected_cleanly(bytes) ? 1 : 0;
    }
  }
  // Flips of immediates, seeds and padding-free payload bytes parse fine;
  // the test's point is that none crash or slip past validation.
  EXPECT_GT(parsed, 0);
}

// The corpus is committed; SPYRE_UPDATE_PROGRAM_CORPUS=1 rewrites it from
// the generators when the format version changes.
TEST(ProgramCorpus, FilesMatchTheirGenerators) {
  bool update = std::getenv("SPYRE_UPDATE_PROGRAM_CORPUS") != nullptr;
  if (update) std::filesystem::create_directories(corpus_dir());
  for (const auto& [name, program] : testing::corpus_programs()) {
    std::vector<uint8_t> expected = serialize(program);
    if (update) {
      std::ofstream out(corpus_dir() / name, std::ios::binary);
      out.write(reinterpret_cast<const char*>(expected.data()),
                static_cast<std::streamsize>(expected.size()));
    }
    std::vector<uint8_t> stored = read_file(corpus_dir() / name);
    ASSERT_FALSE(stored.empty()) << "missing corpus file " << name;
    EXPECT_EQ(stored, expected) << name;
    EXPECT_EQ(deserialize(stored, kLimits), program) << name;
  }
}

// Seeded random mutations of the corpus: byte writes, bit flips, inserts,
// deletes, truncations, range duplication and random u32 lengths; most are
// resealed so they reach the parser and validator.
TEST(ProgramCorpus, RandomMutationFuzz) {
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    corpus.push_back(read_file(entry.path()));
  }
  ASSERT_GE(corpus.size(), 3u);
  std::mt19937_64 rng(20261202);
  auto below = [&](size_t n) {
    return static_cast<size_t>(rng() % std::max<size_t>(n, 1));
  };
  constexpr int kMutations = 20000;
  int parsed = 0;
  auto start = std::chrono::steady_clock::now();
  for (int iter = 0; iter < kMutations; ++iter) {
    std::vector<uint8_t> bytes = corpus[below(corpus.size())];
    int edits = 1 + static_cast<int>(below(4));
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      size_t at = below(bytes.size());
      switch (below(7)) {
        case 0:
          bytes[at] = static_cast<uint8_t>(rng());
          break;
        case 1:
          bytes[at] ^= static_cast<uint8_t>(1u << below(8));
          break;
        case 2:
          bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(at),
                       static_cast<uint8_t>(rng()));
          break;
        case 3:
          bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(at));
          break;
        case 4:
          bytes.resize(at);
          break;
        case 5: {
          size_t len = below(std::min<size_t>(64, bytes.size() - at)) + 1;
          std::vector<uint8_t> copy(
              bytes.begin() + static_cast<ptrdiff_t>(at),
              bytes.begin() + static_cast<ptrdiff_t>(at + len));
          bytes.insert(
              bytes.begin() + static_cast<ptrdiff_t>(below(bytes.size())),
              copy.begin(), copy.end());
          break;
        }
        default:
          if (at + 4 <= bytes.size()) {
            uint32_t values[] = {0, 1, 0xFFFFFFFFu, 0x80000000u,
                                 static_cast<uint32_t>(rng())};
            put_u32(bytes, at, values[below(5)]);
          }
          break;
      }
    }
    if (below(10) != 0) reseal(bytes);
    parsed += parses_or_is_rejected_cleanly(bytes) ? 1 : 0;
    if (::testing::Test::HasFailure()) {
      FAIL() << "mutation " << iter << " misbehaved";
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  RecordProperty("mutations", kMutations);
  RecordProperty("parsed", parsed);
  std::cout << "[ fuzz     ] " << kMutations << " mutations in " << seconds
            << " s, " << parsed << " parsed and validated\n";
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace spyre::rt
