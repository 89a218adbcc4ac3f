// Python binding of the spyreccl c10d backend (torch_spyre._C).
#pragma once

#include <pybind11/pybind11.h>

namespace spyre::torch_glue::distributed {

void bind_distributed(pybind11::module_& m);

}  // namespace spyre::torch_glue::distributed
