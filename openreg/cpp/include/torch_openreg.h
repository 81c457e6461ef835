// libtorch_openreg.so: the openreg backend for C++ programs (no Python).
//
// Link it with libtorch (-ltorch_openreg -ltorch -ltorch_cpu -lc10) and call
// torch_openreg_init() once before using the device: afterwards "openreg:0" tensors, kernels
// and AOTInductor packages compiled for openreg (torch::inductor::AOTIModelPackageLoader)
// work as they do in Python.
#pragma once

#include <cstddef>

extern "C" {
// 0 on success; -1 with the reason in `message` (NUL-terminated, at most message_len bytes).
int torch_openreg_init(char* message, size_t message_len);
}
