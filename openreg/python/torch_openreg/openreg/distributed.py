"""``occl``: the ``torch.distributed`` backend for openreg tensors.

The backend is C++: ``ProcessGroupOCCL`` (``csrc/high_level/ProcessGroupOCCL.cpp``) is a
``c10d::Backend`` whose collectives queue OCCL operations on the device's streams, as
ProcessGroupNCCL queues NCCL's. This file binds it into ``torch_openreg._C`` (through
pybind11, as c10d requires: see ``csrc/ProcessGroupOCCLBinding.cpp``) and registers it with
c10d; no Python runs on a collective's path.
"""

import torch.distributed as dist

import torch_openreg._C as _C

BACKEND = "occl"

# The binding derives from torch._C._distributed_c10d.Backend: torch.distributed is imported.
_C._bind_distributed()

#: ``ProcessGroupOCCL(store, rank, size, options=None)``: the C++ backend of one process group.
ProcessGroupOCCL = _C.ProcessGroupOCCL

#: ``Options(timeout=timedelta(minutes=10), shared_memory=None)``: for
#: ``init_process_group("occl", pg_options=...)``. The timeout bounds how long a rank waits for
#: a peer (it overrides ``init_process_group``'s); ranks on one host share memory unless
#: ``shared_memory=False`` or ``OCCL_SHM=0``.
Options = ProcessGroupOCCL.Options


# ANCHOR: register
def _create(dist_options, backend_options) -> ProcessGroupOCCL:
    """c10d's creator (the extended API): the group's prefixed store, this rank's place in the
    group, and the ``pg_options`` the user gave, if any."""
    if not isinstance(backend_options, Options):
        backend_options = Options(timeout=dist_options.timeout)
    return ProcessGroupOCCL(dist_options.store, dist_options.group_rank, dist_options.group_size,
                            backend_options)


def _register() -> None:
    """Makes ``init_process_group("occl")`` work, and occl the default for openreg tensors."""
    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["openreg"])
# ANCHOR_END: register
