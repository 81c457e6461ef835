"""Random state of the openreg devices: one default generator per device."""

import torch
import torch_openreg._C as _C


# ANCHOR: random
def _generator(device=None) -> torch.Generator:
    index = _C._get_device() if device is None else torch.device("openreg", device).index
    return _C._get_default_generator(index)


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(_C._get_device_count()):
        _generator(index).manual_seed(int(seed))


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(state: torch.Tensor, device=None) -> None:
    _generator(device).set_state(state)
# ANCHOR_END: random
