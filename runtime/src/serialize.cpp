// The versioned binary program format.
//
// Layout: "SPYREPRG", u32 version, the program, u32 CRC-32 (IEEE) of every
// byte before it. Fields are little-endian fixed-width integers; doubles are
// their IEEE-754 bits as u64; bools and enums are one byte; strings and
// vectors carry a u32 length prefix; an instruction is its variant index (u8)
// followed by its fields. One field list per type (the `fields` overloads)
// drives both the writer and the reader, so the two cannot drift apart.
#include <array>
#include <bit>
#include <cstring>
#include <string_view>
#include <utility>

#include "spyre/runtime/error.h"
#include "spyre/runtime/program.h"

namespace spyre::rt {

namespace {

constexpr std::string_view kMagic = "SPYREPRG";
constexpr size_t kHeaderBytes = 8 + 4;
constexpr size_t kChecksumBytes = 4;

uint32_t crc32(std::span<const uint8_t> bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) {
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      }
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

// ---------------------------------------------------------------------------
// Field lists, one per type, shared by Writer and Reader. `P` is T or const T.

template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, SymAddr>
void fields(Ar& ar, P& a) { ar(a.slot, a.offset); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, StickTransfer>
void fields(Ar& ar, P& x) {
  ar(x.dram, x.spad, x.run_bytes, x.count1, x.count2, x.dram_stride1,
     x.dram_stride2, x.spad_stride1, x.spad_stride2, x.share_group);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, DmaLoad>
void fields(Ar& ar, P& i) { ar(i.xfer); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, DmaStore>
void fields(Ar& ar, P& i) { ar(i.xfer, i.mask_begin, i.mask_end); }
template <typename Ar, typename P>
requires std::is_base_of_v<IndexedRows, std::remove_const_t<P>>
void fields(Ar& ar, P& g) {
  ar(g.table, g.table_rows, g.table_row_stride, g.row_bytes, g.index_spad,
     g.index_dtype, g.count, g.spad, g.spad_stride);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, RingSend>
void fields(Ar& ar, P& s) { ar(s.channel, s.dst_core, s.spad, s.bytes); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, StickTranspose>
void fields(Ar& ar, P& t) { ar(t.dtype, t.cols, t.pitch); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, RingRecv>
void fields(Ar& ar, P& r) {
  ar(r.channel, r.src_core, r.spad, r.bytes, r.transpose);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, Tile>
void fields(Ar& ar, P& t) { ar(t.offset, t.dtype, t.row_stride, t.col_stride); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, MatMul>
void fields(Ar& ar, P& m) { ar(m.a, m.b, m.c, m.m, m.n, m.k, m.accumulate); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, Vector>
void fields(Ar& ar, P& v) {
  ar(v.op, v.dst, v.src0, v.src1, v.src2, v.rows, v.cols, v.src1_is_imm, v.imm,
     v.imm2);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, Reduce>
void fields(Ar& ar, P& r) {
  ar(r.op, r.dst, r.src, r.rows, r.cols, r.accumulate, r.index_base);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, RandFill>
void fields(Ar& ar, P& f) {
  ar(f.dst, f.rows, f.cols, f.dist, f.seed, f.offset, f.a, f.b);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, CoreProgram>
void fields(Ar& ar, P& c) { ar(c.core, c.scratchpad_bytes, c.instructions); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, SlotLayout>
void fields(Ar& ar, P& l) { ar(l.device_size); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, ArgSlot>
void fields(Ar& ar, P& a) {
  ar(a.name, a.dtype, a.bytes, a.layout, a.is_output);
}
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, Constant>
void fields(Ar& ar, P& c) { ar(c.name, c.dtype, c.data); }
template <typename Ar, typename P>
requires std::is_same_v<std::remove_const_t<P>, Program>
void fields(Ar& ar, P& p) { ar(p.name, p.args, p.constants, p.cores); }

// ---------------------------------------------------------------------------
// Writer

class Writer {
 public:
  std::vector<uint8_t> bytes;

  template <typename T>
  requires std::is_integral_v<T>
  void value(const T& v) {
    using U = std::make_unsigned_t<T>;
    U u = static_cast<U>(v);
    for (size_t i = 0; i < sizeof(T); ++i) {
      bytes.push_back(static_cast<uint8_t>(u >> (8 * i)));
    }
  }
  void value(const bool& v) { value(static_cast<uint8_t>(v ? 1 : 0)); }
  void value(const double& v) { value(std::bit_cast<uint64_t>(v)); }
  template <typename E>
  requires std::is_enum_v<E>
  void value(const E& e) { value(static_cast<uint8_t>(e)); }
  void value(const std::string& s) {
    value(static_cast<uint32_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void value(const std::vector<uint8_t>& v) {
    value(static_cast<uint32_t>(v.size()));
    bytes.insert(bytes.end(), v.begin(), v.end());
  }
  template <typename T>
  void value(const std::vector<T>& v) {
    value(static_cast<uint32_t>(v.size()));
    for (const T& item : v) value(item);
  }
  void value(const Instruction& inst) {
    value(static_cast<uint8_t>(inst.index()));
    std::visit([this](const auto& i) { fields(*this, i); }, inst);
  }
  template <typename T>
  requires(std::is_class_v<T>) void value(const T& v) { fields(*this, v); }

  template <typename... Ts>
  void operator()(const Ts&... vs) {
    (value(vs), ...);
  }
};

// ---------------------------------------------------------------------------
// Reader: every read is bounds-checked and every error names its offset.

class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, size_t offset, size_t end)
      : bytes_(bytes), offset_(offset), end_(end) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return end_ - offset_; }

  [[noreturn]] void fail(size_t at, const std::string& reason) const {
    throw Error(ErrorCode::kMalformedProgram,
                str("malformed program at byte offset ", at, ": ", reason));
  }

  template <typename T>
  requires std::is_integral_v<T>
  void value(T& v) {
    using U = std::make_unsigned_t<T>;
    need(sizeof(T), "a field");
    U u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<U>(static_cast<U>(bytes_[offset_ + i]) << (8 * i));
    }
    offset_ += sizeof(T);
    v = static_cast<T>(u);
  }
  void value(bool& v) {
    size_t at = offset_;
    uint8_t raw = 0;
    value(raw);
    if (raw > 1) fail(at, str("boolean byte ", int{raw}, " is not 0 or 1"));
    v = raw == 1;
  }
  void value(double& v) {
    uint64_t bits = 0;
    value(bits);
    v = std::bit_cast<double>(bits);
  }
  void value(DType& t) { read_enum(t, kNumDTypes, "dtype"); }
  void value(VecOp& op) { read_enum(op, kNumVecOps, "VecOp"); }
  void value(RedOp& op) { read_enum(op, kNumRedOps, "RedOp"); }
  void value(RandDist& d) {
    read_enum(d, static_cast<int>(RandDist::kNormal) + 1, "RandDist");
  }
  void value(std::string& s) {
    uint32_t n = length(1, "string");
    s.assign(reinterpret_cast<const char*>(bytes_.data() + offset_), n);
    offset_ += n;
  }
  void value(std::vector<uint8_t>& v) {
    uint32_t n = length(1, "byte array");
    v.assign(bytes_.begin() + static_cast<ptrdiff_t>(offset_),
             bytes_.begin() + static_cast<ptrdiff_t>(offset_ + n));
    offset_ += n;
  }
  template <typename T>
  void value(std::vector<T>& v) {
    uint32_t n = length(min_encoded_bytes<T>(), "vector");
    v.clear();
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) value(v.emplace_back());
  }
  void value(Instruction& inst) {
    size_t at = offset_;
    uint8_t index = 0;
    value(index);
    if (index >= std::variant_size_v<Instruction>) {
      fail(at, str("unknown instruction type ", int{index}));
    }
    emplace(inst, index,
            std::make_index_sequence<std::variant_size_v<Instruction>>{});
  }
  template <typename T>
  requires(std::is_class_v<T>) void value(T& v) { fields(*this, v); }

  template <typename... Ts>
  void operator()(Ts&... vs) {
    (value(vs), ...);
  }

 private:
  void need(size_t n, const char* what) const {
    if (remaining() < n) {
      fail(offset_, str("truncated: ", what, " needs ", n, " bytes, ",
                        remaining(), " remain"));
    }
  }

  // A length prefix, checked against what the rest of the input can hold
  // before anything is allocated for it.
  uint32_t length(size_t min_element_bytes, const char* what) {
    size_t at = offset_;
    uint32_t n = 0;
    value(n);
    if (static_cast<uint64_t>(n) * min_element_bytes > remaining()) {
      fail(at, str(what, " length ", n, " needs at least ",
                   static_cast<uint64_t>(n) * min_element_bytes,
                   " bytes but only ", remaining(), " remain"));
    }
    return n;
  }

  template <typename E>
  void read_enum(E& e, int count, const char* what) {
    size_t at = offset_;
    uint8_t raw = 0;
    value(raw);
    if (raw >= count) fail(at, str("unknown ", what, " value ", int{raw}));
    e = static_cast<E>(raw);
  }

  template <size_t... I>
  void emplace(Instruction& inst, uint8_t index, std::index_sequence<I...>) {
    auto read_if = [&]<size_t K>(std::integral_constant<size_t, K>) {
      if (index != K) return false;
      value(inst.emplace<K>());
      return true;
    };
    (read_if(std::integral_constant<size_t, I>{}) || ...);
  }

  // The fewest bytes an encoded element can take (bounds vector lengths).
  template <typename T>
  static constexpr size_t min_encoded_bytes() {
    if constexpr (std::is_same_v<T, Instruction>) {
      return 1 + 16;  // type byte + the smallest instruction (a ring end)
    } else if constexpr (std::is_arithmetic_v<T>) {
      return sizeof(T);
    } else {
      return 4;  // every struct starts with a u32 or a length prefix
    }
  }

  std::span<const uint8_t> bytes_;
  size_t offset_;
  size_t end_;
};

uint32_t read_u32_at(std::span<const uint8_t> bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= uint32_t{bytes[at + i]} << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> serialize(const Program& program) {
  Writer out;
  out.bytes.assign(kMagic.begin(), kMagic.end());
  out.value(kProgramFormatVersion);
  out.value(program);
  out.value(crc32(out.bytes));
  return out.bytes;
}

Program deserialize(std::span<const uint8_t> bytes,
                    const ProgramLimits& limits) {
  Reader header(bytes, 0, bytes.size());
  if (bytes.size() < kHeaderBytes + kChecksumBytes) {
    header.fail(0, str("truncated: ", bytes.size(),
                       " bytes cannot hold the header and checksum (",
                       kHeaderBytes + kChecksumBytes, " bytes)"));
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    header.fail(0, "bad magic: not a SPYREPRG program");
  }
  uint32_t version = read_u32_at(bytes, kMagic.size());
  if (version != kProgramFormatVersion) {
    header.fail(kMagic.size(), str("unsupported format version ", version,
                                   " (this runtime reads version ",
                                   kProgramFormatVersion, ")"));
  }
  size_t checksum_at = bytes.size() - kChecksumBytes;
  uint32_t stored = read_u32_at(bytes, checksum_at);
  uint32_t actual = crc32(bytes.first(checksum_at));
  if (stored != actual) {
    header.fail(checksum_at,
                str("checksum mismatch: stored ", stored, ", computed ", actual,
                    " (the file is corrupt or truncated)"));
  }
  Program program;
  Reader in(bytes, kHeaderBytes, checksum_at);
  in.value(program);
  if (in.remaining() != 0) {
    in.fail(in.offset(),
            str(in.remaining(), " trailing bytes after the program"));
  }
  validate(program, limits);
  return program;
}

}  // namespace spyre::rt
