"""The ``spyreccl`` torch.distributed backend for spyre tensors.

``init_process_group("cpu:gloo,spyre:spyreccl")`` (or plain
``init_process_group()``, which picks spyreccl for spyre tensors) gives each
spyre collective to ``torch_spyre._C``'s C++ backend. In this first version
that backend stages the tensors through pinned host memory and runs the
collective with an inner gloo process group on the same store, rank and size:
reductions run on the host (only ReduceOp.AVG's division runs on the device).
"""

import torch

BACKEND_NAME = "spyreccl"


def _create_backend(options, backend_options=None):
    """Creator for ``Backend.register_backend(..., extended_api=True)``."""
    from torch.distributed import ProcessGroupGloo

    from . import _C

    # The prefix keeps the inner gloo's store keys apart from those of a
    # gloo backend that serves the same group for CPU tensors.
    store = torch.distributed.PrefixStore(f"{BACKEND_NAME}/", options.store)
    transport = ProcessGroupGloo(store, options.group_rank, options.group_size,
                                 options.timeout)
    return _C._create_spyreccl_backend(transport, options.group_rank, options.group_size)


def register():
    """Registers spyreccl with torch.distributed once per process."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return
    backend = dist.Backend
    if BACKEND_NAME.upper() in backend._plugins:
        return
    backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True,
                             devices=["spyre"])
