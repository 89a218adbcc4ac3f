#include "distributed/bindings.h"

#include <torch/csrc/utils/pybind.h>

#include "distributed/spyreccl.h"

namespace spyre::torch_glue::distributed {
namespace {

// The transport arrives from Python (torch.distributed.ProcessGroupGloo)
// because the torch wheel ships gloo's library but not its headers.
c10::intrusive_ptr<c10d::Backend> create_spyreccl(
    const c10::intrusive_ptr<c10d::Backend>& transport, int rank, int size) {
  return c10::make_intrusive<SpyrecclBackend>(transport, rank, size);
}

}  // namespace

void bind_distributed(pybind11::module_& m) {
  m.def("_create_spyreccl_backend", &create_spyreccl,
        pybind11::arg("transport"), pybind11::arg("rank"),
        pybind11::arg("size"),
        "The spyreccl c10d backend over a host transport backend (gloo).");
}

}  // namespace spyre::torch_glue::distributed
