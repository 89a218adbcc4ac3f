#include "generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "device_state.h"

namespace spyre::torch_glue {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

SpyreGeneratorImpl::SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kSpyre, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void SpyreGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
uint64_t SpyreGeneratorImpl::current_seed() const { return seed_; }
uint64_t SpyreGeneratorImpl::seed() {
  const uint64_t fresh = c10::detail::getNonDeterministicRandom();
  set_current_seed(fresh);
  return fresh;
}
void SpyreGeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t SpyreGeneratorImpl::get_offset() const { return offset_; }

void SpyreGeneratorImpl::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK_VALUE(
      state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
          state.device().is_cpu() &&
          static_cast<size_t>(state.numel()) == kStateBytes &&
          state.is_contiguous(),
      "spyre: a generator state is a contiguous CPU uint8 tensor of ",
      kStateBytes, " bytes (seed, offset); got ", state.numel(),
      " elements of ", state.dtype().name());
  const auto* bytes = static_cast<const uint8_t*>(state.data());
  std::memcpy(&seed_, bytes, sizeof(uint64_t));
  std::memcpy(&offset_, bytes + sizeof(uint64_t), sizeof(uint64_t));
}

c10::intrusive_ptr<c10::TensorImpl> SpyreGeneratorImpl::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kStateBytes)}, at::kByte);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> SpyreGeneratorImpl::philox_engine_inputs(
    uint64_t increment) {
  const uint64_t offset = offset_;
  // Keep offsets multiples of 4, as Philox produces 4 values per counter.
  offset_ += (increment + 3) / 4 * 4;
  return {seed_, offset};
}

c10::DeviceType SpyreGeneratorImpl::device_type() { return kSpyre; }

SpyreGeneratorImpl* SpyreGeneratorImpl::clone_impl() const {
  auto* copy = new SpyreGeneratorImpl(device().index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  static std::mutex mutex;
  static std::deque<at::Generator> generators;  // stable addresses
  std::lock_guard<std::mutex> lock(mutex);
  while (generators.size() < static_cast<size_t>(device_count())) {
    generators.push_back(at::make_generator<SpyreGeneratorImpl>(
        static_cast<c10::DeviceIndex>(generators.size()), kDefaultSeed));
  }
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<SpyreGeneratorImpl>(resolve_device_index(device),
                                                kDefaultSeed);
}

at::Generator cpu_generator_for(const at::Generator& spyre,
                                uint64_t increment) {
  auto* impl = at::check_generator<SpyreGeneratorImpl>(spyre);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  const auto [seed, offset] = impl->philox_engine_inputs(increment);
  return at::make_generator<at::CPUGeneratorImpl>(
      splitmix64(seed ^ splitmix64(offset)));
}

}  // namespace spyre::torch_glue
