import pytest
import torch


@pytest.fixture(autouse=True)
def _device_zero():
    """Each test starts and ends on openreg:0."""
    torch.openreg.set_device(0)
    yield
    torch.openreg.set_device(0)
