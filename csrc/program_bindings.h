// Python bindings of device programs (torch_spyre._C): building, validating
// and serialising rt::Program from Python for the compiler.
#pragma once

#include <pybind11/pybind11.h>

namespace spyre::torch_glue {

void bind_programs(pybind11::module_& m);

}  // namespace spyre::torch_glue
