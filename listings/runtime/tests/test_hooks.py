# ANCHOR: tests
import pytest
import torch
import torch_openreg  # noqa: F401


def test_seeding_reproduces_per_device():
    torch.manual_seed(3)  # reaches torch.openreg.manual_seed_all
    a = torch.randn(4, device="openreg").cpu()
    torch.openreg.manual_seed(3)
    assert torch.equal(torch.randn(4, device="openreg").cpu(), a)
    assert torch.openreg.initial_seed() == 3
    state = torch.openreg.get_rng_state(1)
    b = torch.rand(3, device="openreg:1").cpu()
    torch.openreg.set_rng_state(state, 1)
    assert torch.equal(torch.rand(3, device="openreg:1").cpu(), b)


def test_generators_belong_to_a_device():
    g = torch.Generator(device="openreg:1").manual_seed(5)
    assert g.device == torch.device("openreg:1")
    x = torch.rand(2, device="openreg:1", generator=g)
    assert x.device == torch.device("openreg:1")
    with pytest.raises(RuntimeError, match="Expected a generator on openreg:0"):
        torch.rand(2, device="openreg:0", generator=g)


def test_hooks_answer_for_the_device():
    assert torch._C._accelerator_hooks_device_count() == 2
    assert torch._C._accelerator_hooks_maybe_exchange_device(9) == 0
    assert torch._C._accelerator_getDefaultGenerator(1).device == torch.device("openreg:1")
# ANCHOR_END: tests
