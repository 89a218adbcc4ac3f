#include "spyre/runtime/device.h"

#include <algorithm>
#include <memory>

#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

// Rethrows a chunk's failure naming the whole copy, so the message says
// which range was asked for and what to do about it.
[[noreturn]] void rethrow_chunk_error(const Error& error, const char* what,
                                      DevicePtr ptr, uint64_t bytes,
                                      uint64_t begin, uint64_t end) {
  throw Error(
      error.code(),
      str(what, " of ", bytes, " bytes at device address 0x", std::hex, ptr,
          std::dec, " failed at bytes [", begin, ", ", end, "): ", error.what(),
          "; pass a range inside one live allocation (allocate at "
          "least the image's device bytes)"));
}

// Calls chunk(begin, end) for the kCopyChunkBytes pieces of [0, bytes), the
// last one first: a range that overruns its allocation (the usual mistake)
// then fails before any byte is moved.
template <typename Chunk>
void for_each_chunk(uint64_t bytes, Chunk&& chunk) {
  const uint64_t size = std::min(bytes, Device::kCopyChunkBytes);
  const uint64_t last = (bytes - 1) / size * size;
  chunk(last, bytes);
  for (uint64_t begin = 0; begin < last; begin += size) {
    chunk(begin, begin + size);
  }
}

}  // namespace

std::unique_ptr<Queue> Device::create_queue() {
  return make_thread_queue("spyre" + std::to_string(properties().index) +
                           " queue");
}

double Device::copy_to_device_packed(DevicePtr dst, uint64_t bytes,
                                     const ChunkWriter& write) {
  if (bytes == 0) return 0;
  const auto bounce = std::make_unique_for_overwrite<uint8_t[]>(
      std::min(bytes, kCopyChunkBytes));
  double ns = 0;
  for_each_chunk(bytes, [&](uint64_t begin, uint64_t end) {
    write(bounce.get(), begin, end);
    try {
      ns += copy_to_device(dst + begin, bounce.get(), end - begin);
    } catch (const Error& error) {
      rethrow_chunk_error(error, "copy_to_device_packed", dst, bytes, begin,
                          end);
    }
  });
  return ns;
}

double Device::copy_to_host_unpacked(DevicePtr src, uint64_t bytes,
                                     const ChunkReader& read) {
  if (bytes == 0) return 0;
  const auto bounce = std::make_unique_for_overwrite<uint8_t[]>(
      std::min(bytes, kCopyChunkBytes));
  double ns = 0;
  for_each_chunk(bytes, [&](uint64_t begin, uint64_t end) {
    try {
      ns += copy_to_host(bounce.get(), src + begin, end - begin);
    } catch (const Error& error) {
      rethrow_chunk_error(error, "copy_to_host_unpacked", src, bytes, begin,
                          end);
    }
    read(bounce.get(), begin, end);
  });
  return ns;
}

double Device::copy_runs_to_device(DevicePtr base,
                                   std::span<const CopyRun> runs,
                                   const void* src) {
  const auto* from = static_cast<const uint8_t*>(src);
  double ns = 0;
  for (const CopyRun& run : runs) {
    ns += copy_to_device(base + run.offset, from, run.bytes);
    from += run.bytes;
  }
  return ns;
}

double Device::copy_runs_to_host(void* dst, DevicePtr base,
                                 std::span<const CopyRun> runs) {
  auto* to = static_cast<uint8_t*>(dst);
  double ns = 0;
  for (const CopyRun& run : runs) {
    ns += copy_to_host(to, base + run.offset, run.bytes);
    to += run.bytes;
  }
  return ns;
}

double Device::copy_to_peer(Device& peer, DevicePtr dst, DevicePtr src,
                            uint64_t bytes) {
  // The read side bounces through the host chunk by chunk; each chunk goes
  // on to the peer as it arrives.
  double peer_ns = 0;
  const double ns = copy_to_host_unpacked(
      src, bytes, [&](const uint8_t* in, uint64_t begin, uint64_t end) {
        try {
          peer_ns += peer.copy_to_device(dst + begin, in, end - begin);
        } catch (const Error& error) {
          rethrow_chunk_error(error, "copy_to_peer", dst, bytes, begin, end);
        }
      });
  return ns + peer_ns;
}

}  // namespace spyre::rt
