"""Legacy tensor types, ``torch.openreg.FloatTensor`` and friends, as ``torch.cuda`` has them:
calling one makes a tensor of its dtype on the current openreg device, and ``isinstance``
tells whether a tensor is one."""

import torch

# ANCHOR: legacy
_TYPES = {
    "FloatTensor": torch.float32,
    "DoubleTensor": torch.float64,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "ShortTensor": torch.int16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "BoolTensor": torch.bool,
}


class _LegacyTensorType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Tensor) and obj.device.type == "openreg" and obj.dtype == cls.dtype

    def __call__(cls, *args):
        """``FloatTensor(2, 3)`` is uninitialised; ``FloatTensor([1, 2])`` copies the data."""
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=cls.dtype, device="openreg")
        return torch.empty(*args, dtype=cls.dtype, device="openreg")


for _name, _dtype in _TYPES.items():
    globals()[_name] = _LegacyTensorType(_name, (), {"dtype": _dtype, "__module__": "torch.openreg"})
# ANCHOR_END: legacy

__all__ = list(_TYPES)
