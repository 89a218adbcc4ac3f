// The spyre random generator: Philox-style (seed, offset) state per device.
// Device kernels will consume counter ranges with philox_engine_inputs();
// until they exist, random ops run through the CPU fallback, which draws
// from a CPU generator derived from (seed, offset) so spyre seeds decide the
// numbers (see fallback.cpp).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <utility>

namespace spyre::torch_glue {

class SpyreGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;  // a fresh non-deterministic seed
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  // State: 16 bytes, seed then offset (little endian), as a CPU uint8 tensor.
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserves `increment` counter values: returns the seed and the offset
  // before the reservation.
  std::pair<uint64_t, uint64_t> philox_engine_inputs(uint64_t increment);

  static c10::DeviceType device_type();

 private:
  SpyreGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// A CPU generator seeded from the next `increment` draws of `spyre`.
at::Generator cpu_generator_for(const at::Generator& spyre, uint64_t increment);

}  // namespace spyre::torch_glue
