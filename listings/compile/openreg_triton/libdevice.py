"""``libdevice`` for Triton's interpreter: the math functions Inductor's Triton kernels call.

A compiled kernel's ``libdevice.erf(x)`` is resolved by the backend's module map to a device
math library. Triton's interpreter has no such step: its ``extern_elementwise`` raises, and the
stubs in ``triton.language.extra.libdevice`` return None (triton-lang/triton#8825). Inductor's
kernels for openreg import this module instead (``torch_openreg.compile.OpenRegWrapperCodegen``); each
function computes on the interpreter's blocks (numpy arrays), with torch's CPU kernels where
numpy has no function, so results match the CPU's.
"""

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle, interpreter_semantic


def _operands(args):
    """Interpreter tensors, broadcast and promoted together as Triton's binary ops do."""
    tensors = [a if isinstance(a, tl.tensor) else interpreter_semantic.to_tensor(a) for a in args]
    for i in range(1, len(tensors)):
        tensors[0], tensors[i] = interpreter_semantic.binary_op_type_checking_impl(tensors[0], tensors[i])
    for i in range(1, len(tensors) - 1):
        tensors[i], tensors[-1] = interpreter_semantic.binary_op_type_checking_impl(tensors[i], tensors[-1])
    return tensors


def _result(data, like, dtype=None):
    dtype = dtype or like.dtype
    np_type = {tl.int1: np.bool_, tl.int32: np.int32, tl.int64: np.int64}.get(dtype, like.handle.data.dtype)
    data = np.asarray(data).astype(np_type, copy=False)
    kind = tl.block_type(dtype, like.shape) if like.type.is_block() else dtype
    return tl.tensor(TensorHandle(data, dtype), kind)


def _numpy(function, dtype=None):
    def apply(*args, **_):
        operands = _operands(args)
        with np.errstate(all="ignore"):
            data = function(*(o.handle.data for o in operands))
        return _result(data, operands[0], dtype)

    return apply


def _torch(function):
    """A torch CPU function on the blocks (for functions numpy lacks)."""

    def on_arrays(*arrays):
        return function(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)).numpy()

    return _numpy(on_arrays)


def _fma(a, b, c):
    # One rounding, as the hardware instruction: exact in float64 for float32 operands.
    wide = np.float64 if a.dtype != np.float64 else np.longdouble
    return a.astype(wide) * b.astype(wide) + c.astype(wide)


def _ilogb(x):
    _, exponent = np.frexp(x)
    return np.where(x == 0, np.iinfo(np.int32).min, exponent - 1)


abs = _numpy(np.abs)
acos = _numpy(np.arccos)
acosh = _numpy(np.arccosh)
asin = _numpy(np.arcsin)
asinh = _numpy(np.arcsinh)
atan = _numpy(np.arctan)
atan2 = _numpy(np.arctan2)
atanh = _numpy(np.arctanh)
ceil = _numpy(np.ceil)
copysign = _numpy(np.copysign)
cos = _numpy(np.cos)
cosh = _numpy(np.cosh)
cyl_bessel_i0 = _torch(torch.special.i0)
cyl_bessel_i1 = _torch(torch.special.i1)
div_rn = _numpy(np.divide)
erf = _torch(torch.erf)
erfc = _torch(torch.erfc)
erfcx = _torch(torch.special.erfcx)
erfinv = _torch(torch.erfinv)
exp = _numpy(np.exp)
exp2 = _numpy(np.exp2)
expm1 = _numpy(np.expm1)
fast_tanhf = _numpy(np.tanh)
floor = _numpy(np.floor)
fma = _numpy(_fma)
fmod = _numpy(np.fmod)
hypot = _numpy(np.hypot)
ilogb = _numpy(_ilogb, tl.int32)
isinf = _numpy(np.isinf, tl.int1)
isnan = _numpy(np.isnan, tl.int1)
ldexp = _numpy(lambda x, e: np.ldexp(x, e.astype(np.int32)))
lgamma = _torch(torch.lgamma)
llrint = _numpy(np.rint, tl.int64)
log = _numpy(np.log)
log10 = _numpy(np.log10)
log1p = _numpy(np.log1p)
log2 = _numpy(np.log2)
mul_rn = _numpy(np.multiply)
nearbyint = _numpy(np.rint)
nextafter = _numpy(np.nextafter)
nextafterf = nextafter
pow = _numpy(np.power)
rsqrt = _numpy(lambda x: 1 / np.sqrt(x))
signbit = _numpy(np.signbit, tl.int1)
sin = _numpy(np.sin)
sinh = _numpy(np.sinh)
sqrt = _numpy(np.sqrt)
tan = _numpy(np.tan)
tanh = _numpy(np.tanh)
trunc = _numpy(np.trunc)


FUNCTIONS = sorted(name for name, value in globals().items()
                   if not name.startswith("_") and getattr(value, "__name__", "") == "apply")


def __getattr__(name):
    raise NotImplementedError(
        f"libdevice.{name} has no implementation for Triton's interpreter in {__name__}; it has "
        f"{', '.join(FUNCTIONS)}")

