"""The PrivateUse1 hooks, called the way PyTorch core calls them."""

import pytest
import torch

C = torch._C


def test_device_hooks():
    assert C._accelerator_hooks_device_count() == 2
    assert C._accelerator_hooks_get_current_device() == 0
    assert C._accelerator_hooks_exchange_device(1) == 0
    assert C._accelerator_hooks_get_current_device() == 1
    # maybeExchangeDevice ignores an invalid index and reports the current device.
    assert C._accelerator_hooks_maybe_exchange_device(5) == 1
    assert C._accelerator_hooks_maybe_exchange_device(0) == 1
    C._accelerator_hooks_set_current_device(1)
    assert torch.openreg.current_device() == 1
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal: index 3 "):
        C._accelerator_hooks_set_current_device(3)
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal: index 2 "):
        C._accelerator_hooks_exchange_device(2)


def test_generator_hooks():
    default = C._accelerator_getDefaultGenerator(1)
    assert default.device == torch.device("openreg:1")
    assert C._accelerator_getDefaultGenerator(1).initial_seed() == default.initial_seed()
    fresh = torch.Generator(device="openreg")
    assert fresh.device == torch.device("openreg:0")
    clone = fresh.manual_seed(5).clone_state()
    assert clone.device == fresh.device and clone.initial_seed() == 5
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal: index 4 "):
        C._accelerator_getDefaultGenerator(4)


def test_pinned_memory_hooks():
    pinned = torch.empty(100).pin_memory()
    assert pinned.is_pinned()
    assert not torch.empty(100).is_pinned()
    assert not pinned[10:].clone().is_pinned()
    assert pinned[10:].is_pinned()  # inside the pinned allocation
