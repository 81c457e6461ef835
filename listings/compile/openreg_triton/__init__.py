"""Triton's backend plugin for openreg: what a vendor's Triton backend registers.

Triton finds backends through the ``triton.backends`` entry point (pyproject.toml), imports
``<package>.driver`` and ``<package>.compiler`` and takes the one concrete ``DriverBase`` and
``BaseBackend`` in each. A real accelerator's compiler lowers Triton IR to its binary and its
driver launches that binary on a stream. Ours compiles nothing: openreg's Triton kernels run in
Triton's interpreter (``TRITON_INTERPRET=1``), which copies each argument's storage to the host,
runs the kernel there and copies the results back, through the device's own copies.
"""
