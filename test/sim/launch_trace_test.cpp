// SPYRE_TRACE: a launch appends its schedule to a Chrome trace file that
// stays valid JSON, with one row per core engine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "sim_test_util.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

// ---- a minimal JSON reader (enough for Chrome trace files)
// --------------------

struct Json;
using JsonObject = std::map<std::string, Json>;
using JsonArray = std::vector<Json>;
struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, JsonArray, JsonObject>
      value;
  const JsonObject& object() const { return std::get<JsonObject>(value); }
  const JsonArray& array() const { return std::get<JsonArray>(value); }
  const std::string& str() const { return std::get<std::string>(value); }
  double number() const { return std::get<double>(value); }
  bool has(const std::string& key) const {
    return object().find(key) != object().end();
  }
  const Json& operator[](const std::string& key) const {
    return object().at(key);
  }
};

// Throws std::runtime_error at the first byte that is not valid JSON.
class JsonReader {
 public:
  explicit JsonReader(std::string text) : s_(std::move(text)) {}

  Json document() {
    Json v = value();
    skip_space();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at byte " +
                             std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
      ++i_;
  }
  char peek() {
    skip_space();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }

  Json value() {
    char c = peek();
    if (c == '{') return Json{object()};
    if (c == '[') return Json{array()};
    if (c == '"') return Json{string()};
    if (literal("true")) return Json{true};
    if (literal("false")) return Json{false};
    if (literal("null")) return Json{nullptr};
    return Json{number()};
  }
  JsonObject object() {
    JsonObject out;
    expect('{');
    if (peek() == '}') {
      ++i_;
      return out;
    }
    while (true) {
      if (peek() != '"') fail("expected a key");
      std::string key = string();
      expect(':');
      out[key] = value();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return out;
    }
  }
  JsonArray array() {
    JsonArray out;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return out;
    }
    while (true) {
      out.push_back(value());
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return out;
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character");
      if (c == '\\') {
        if (i_ >= s_.size()) fail("unfinished escape");
        char e = s_[i_++];
        if (e != '"' && e != '\\' && e != '/') fail("unsupported escape");
        c = e;
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  double number() {
    size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-0123456789.eE", s_[i_])) ++i_;
    if (start == i_) fail("expected a value");
    return std::stod(s_.substr(start, i_ - start));
  }

  std::string s_;
  size_t i_ = 0;
};

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return JsonReader(text.str()).document();
}

// ---- the trace
// ----------------------------------------------------------------

// Core 0 loads and scales a tile and sends it to core 6, which stores it:
// three engines on core 0, two on core 6.
rt::Program traced_program(const std::string& name) {
  rt::Program p;
  p.name = name;
  p.args = {slot("x", 4096, DType::kFloat32),
            slot("y", 4096, DType::kFloat32, true)};
  rt::Tile t = tile(0, DType::kFloat32, 4096);
  rt::Vector twice = vec(rt::VecOp::kMul, t, t, 1, 1024);
  twice.src1_is_imm = true;
  twice.imm = 2;
  p.cores = {
      core(0, {load(xfer(0, 0, 0, 4096)), twice, rt::RingSend{0, 6, 0, 4096}}),
      core(6, {rt::RingRecv{0, 0, 0, 4096, {}}, store(xfer(1, 0, 0, 4096))})};
  return p;
}

const char* engine_of(const std::string& instruction) {
  if (instruction.rfind("Dma", 0) == 0) return "dma";
  if (instruction.rfind("Ring", 0) == 0) return "ring";
  if (instruction == "MatMul") return "matrix";
  return "vector";
}

struct TraceCounts {
  size_t processes = 0;
  std::map<double, std::string> rows;  // tid -> row name
  size_t row_records = 0;
  std::vector<const JsonObject*> events;
};

TraceCounts count(const Json& trace) {
  TraceCounts out;
  for (const Json& e : trace.array()) {
    const std::string& ph = e["ph"].str();
    if (ph == "M" && e["name"].str() == "process_name") ++out.processes;
    if (ph == "M" && e["name"].str() == "thread_name") {
      out.rows[e["tid"].number()] = e["args"]["name"].str();
      ++out.row_records;
    }
    if (ph == "X") out.events.push_back(&e.object());
  }
  return out;
}

TEST(SimLaunchTrace, EveryLaunchAppendsValidJsonWithOneRowPerCoreEngine) {
  const std::string path = ::testing::TempDir() + "spyre_trace_" +
                           std::to_string(getpid()) + ".json";
  std::remove(path.c_str());
  std::unique_ptr<rt::Device> device;
  {
    ScopedEnv trace("SPYRE_TRACE", path);
    device = small_device();
  }
  // A quote and a backslash in the name must be escaped, not break the file.
  const std::string name = "scale \"by\" 2 \\ send";
  rt::Program program = traced_program(name);
  rt::LoadedProgram loaded(*device, program);
  Buffers buffers(*device, program);
  std::vector<float> x(1024);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 512;
  buffers.upload(0, x);

  rt::LaunchStats stats = loaded.run(buffers.bindings);
  Json first = read_json_file(path);
  TraceCounts one = count(first);
  EXPECT_EQ(one.processes, 1u);
  // Rows: 4 engines for each of the two used cores, named after them.
  ASSERT_EQ(one.rows.size(), 8u);
  EXPECT_EQ(one.rows[0 * 4 + 0], "core 0 dma");
  EXPECT_EQ(one.rows[0 * 4 + 1], "core 0 ring");
  EXPECT_EQ(one.rows[0 * 4 + 2], "core 0 matrix");
  EXPECT_EQ(one.rows[0 * 4 + 3], "core 0 vector");
  EXPECT_EQ(one.rows[6 * 4 + 0], "core 6 dma");
  EXPECT_EQ(one.rows[6 * 4 + 3], "core 6 vector");
  // One complete event per instruction, on its engine's row.
  ASSERT_EQ(one.events.size(), stats.instructions);
  double end_us = 0;
  for (const JsonObject* e : one.events) {
    const std::string& inst = e->at("name").str();
    const std::string& row = one.rows.at(e->at("tid").number());
    EXPECT_NE(row.find(engine_of(inst)), std::string::npos)
        << inst << " on row " << row;
    EXPECT_EQ(e->at("cat").str(), name);
    EXPECT_GE(e->at("ts").number(), 0.0);
    EXPECT_GT(e->at("dur").number(), 0.0);
    end_us = std::max(end_us, e->at("ts").number() + e->at("dur").number());
  }
  EXPECT_NEAR(end_us, stats.cycles / kTimingTable.clock_ghz / 1000, 1e-6);

  // Two more launches: the file is still one valid array, each launch's
  // events placed after the previous launch's modelled time.
  loaded.run(buffers.bindings);
  loaded.run(buffers.bindings);
  Json third = read_json_file(path);
  TraceCounts three = count(third);
  EXPECT_EQ(three.processes, 3u);
  EXPECT_EQ(three.row_records, 3u * 8u);
  ASSERT_EQ(three.events.size(), 3 * stats.instructions);
  const double launch_us = stats.time_ns / 1000;
  for (size_t i = 0; i < three.events.size(); ++i) {
    size_t launch = i / stats.instructions;
    double ts = three.events[i]->at("ts").number();
    EXPECT_GE(ts, launch * launch_us - 1e-6) << "event " << i;
    EXPECT_LT(ts, (launch + 1) * launch_us) << "event " << i;
  }
  // The data still flowed: y = 2 x.
  std::vector<float> y = buffers.download<float>(1);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2 * x[i]) << i;
  std::remove(path.c_str());
}

TEST(SimLaunchTrace, ARemovedTraceFileStartsOver) {
  // Clearing old traces while a process runs must not fail its next launch.
  const std::string path = ::testing::TempDir() + "spyre_trace_removed_" +
                           std::to_string(getpid()) + ".json";
  std::unique_ptr<rt::Device> device;
  {
    ScopedEnv trace("SPYRE_TRACE", path);
    device = small_device();
  }
  rt::Program program = traced_program("restart");
  rt::LoadedProgram loaded(*device, program);
  Buffers buffers(*device, program);
  rt::LaunchStats stats = loaded.run(buffers.bindings);
  ASSERT_EQ(count(read_json_file(path)).events.size(), stats.instructions);
  ASSERT_EQ(std::remove(path.c_str()), 0);
  loaded.run(buffers.bindings);
  EXPECT_EQ(count(read_json_file(path)).events.size(), stats.instructions);
  loaded.run(buffers.bindings);
  EXPECT_EQ(count(read_json_file(path)).events.size(), 2 * stats.instructions);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace spyre::sim::test
