"""Random number state of the OpenReg devices: one default generator per device."""

import torch
import torch_openreg._C as _C

from . import _device_index, _lazy_init, device_count

__all__ = [
    "default_generators",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


# ANCHOR: default_generator
def _generator(device=None) -> torch.Generator:
    """The default generator of ``device`` (the current device if None)."""
    _lazy_init()
    return _C._get_default_generator(_device_index(device, optional=True))
# ANCHOR_END: default_generator


# ANCHOR: graphsafe
def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of ``device``: AOTAutograd's graph-safe RNG asks for it
    (``torch._functorch._aot_autograd.utils.get_default_generator``)."""
    return _generator(device)


class _DefaultGenerators:
    """``torch.openreg.default_generators[i]``, as ``torch.cuda.default_generators``; created on
    first use, so importing the package does not initialise the device."""

    def __getitem__(self, index: int) -> torch.Generator:
        if not 0 <= index < device_count():
            raise IndexError(f"openreg device index {index} out of range for {device_count()} devices")
        return _generator(index)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()
# ANCHOR_END: graphsafe


def get_rng_state(device="openreg") -> torch.Tensor:
    """The RNG state of ``device`` as a ByteTensor."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="openreg") -> None:
    """Sets the RNG state of ``device``."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(
            f"expected the RNG state as a torch.ByteTensor, got {type(new_state).__name__}"
            + (f" of dtype {new_state.dtype}" if isinstance(new_state, torch.Tensor) else "")
        )
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def get_rng_state_all() -> list[torch.Tensor]:
    """The RNG states of every device, in device order."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """Sets every device's RNG state from ``new_states``, one per device."""
    new_states = list(new_states)
    if len(new_states) != device_count():
        raise ValueError(f"expected {device_count()} RNG states, one per device, got {len(new_states)}")
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ANCHOR: manual_seed
def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _generator().manual_seed(int(seed))
# ANCHOR_END: manual_seed


def manual_seed_all(seed: int) -> None:
    """Seeds every device's generator (``torch.manual_seed`` calls this)."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic random number."""
    _generator().seed()


def seed_all() -> None:
    """Seeds every device's generator with one non-deterministic random number."""
    value = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(value)


def initial_seed() -> int:
    """The seed the current device's generator was last seeded with."""
    return _generator().initial_seed()
