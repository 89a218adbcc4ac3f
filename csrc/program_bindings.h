// Python bindings of device programs (torch_spyre._C): the kernel library's
// builders for the compiler, and compiled programs loaded and launched.
#pragma once

#include <pybind11/pybind11.h>

namespace spyre::torch_glue {

void bind_programs(pybind11::module_& m);

}  // namespace spyre::torch_glue
