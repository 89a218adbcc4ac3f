#include "spyre/runtime/device.h"

namespace spyre::rt {

std::unique_ptr<Queue> Device::create_queue() {
  return make_thread_queue("spyre" + std::to_string(properties().index) +
                           " queue");
}

}  // namespace spyre::rt
