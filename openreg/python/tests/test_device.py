"""Device management: torch.openreg, torch.accelerator, the device context manager."""

import pytest
import torch


def test_two_devices_available():
    assert torch.openreg.is_available()
    assert torch.openreg.device_count() == 2
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("openreg")
    assert torch.accelerator.device_count() == 2


def test_set_and_current_device():
    torch.openreg.set_device(1)
    assert torch.openreg.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.empty(1, device="openreg").device == torch.device("openreg:1")
    torch.openreg.set_device("openreg:0")
    assert torch.openreg.current_device() == 0
    torch.accelerator.set_device_index(1)
    assert torch.openreg.current_device() == 1
    torch.openreg.set_device(torch.device("openreg", 0))
    assert torch.openreg.current_device() == 0


def test_device_context_manager_restores():
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        with torch.openreg.device("openreg:0"):
            assert torch.openreg.current_device() == 0
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0
    with torch.openreg.device(None):  # no-op
        assert torch.openreg.current_device() == 0
    with torch.accelerator.device_index(1):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0


def test_current_device_is_per_thread():
    import threading

    torch.openreg.set_device(1)
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.openreg.current_device()))
    t.start()
    t.join()
    assert seen == [0]


def test_init_and_is_initialized():
    torch.openreg.init()
    assert torch.openreg.is_initialized()


def test_synchronize():
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    torch.openreg.synchronize()
    torch.openreg.synchronize("openreg:1")


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.empty(1, device="openreg:5"),
        lambda: torch.openreg.set_device(7),
        lambda: torch.accelerator.set_device_index(2),
        lambda: torch.ones(2).to("openreg:3"),
        lambda: torch.openreg.synchronize(9),
    ],
)
def test_bad_device_index_names_value_and_range(call):
    with pytest.raises(RuntimeError, match=r"^OpenReg error: invalid device ordinal: index \d for openreg, expected an index in \[0, 2\)") as info:
        call()
    assert isinstance(info.value, torch.AcceleratorError)


def test_bad_device_types():
    with pytest.raises(ValueError, match="expected an openreg device, got cpu"):
        torch.openreg.set_device("cpu")
    with pytest.raises(TypeError, match="got float"):
        torch.openreg.set_device(1.5)
    with pytest.raises(TypeError):
        torch.openreg._C._set_device("1")
