// The stick-layout rule lives in the kernel library (spyre/kernels/layout.h),
// shared with the compiler and the C++ tests; the glue names it unqualified.
#pragma once

#include "spyre/kernels/layout.h"

namespace spyre::torch_glue {

using kernels::DeviceLayout;
using kernels::make_default_layout;
using kernels::make_layout;
using kernels::pack;
using kernels::pack_range;
using kernels::unpack;
using kernels::unpack_range;

}  // namespace spyre::torch_glue
