// The torch headers most of the glue's files include, compiled once per build into a
// precompiled header (torch-build's `precompile_header`) that every file includes first.
// Only headers any file may see: nothing that depends on a macro a file defines.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/library.h>
