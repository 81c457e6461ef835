"""Parameter identity across Module.to("openreg"): torch._has_compatible_shallow_copy_type is true
between CPU and openreg dense tensors, so Module._apply moves parameters in place. Tied weights
stay tied, Lazy modules materialise on the device, an optimizer built before .to() steps the
live parameters, and state_dict round-trips."""

import copy

import pytest
import torch
from torch import nn


def test_the_check_is_true_for_plain_dense_tensors_only():
    cpu, dev = torch.ones(2), torch.ones(2, device="openreg")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, dev)
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(2).to_sparse())


class TiedLM(nn.Module):
    def __init__(self, vocab=11, dim=6):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2 ties them

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.body(self.wte(ids))))


def test_tied_weights_stay_tied_and_train_like_cpu():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to("openreg")
    assert dev.lm_head.weight is dev.wte.weight
    assert len(list(dev.parameters())) == len(list(cpu.parameters()))
    ids = torch.randint(0, 11, (3, 5))
    for model, x in ((cpu, ids), (dev, ids.to("openreg"))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        opt.step()
    torch.testing.assert_close(dev.wte.weight.detach().cpu(), cpu.wte.weight.detach(), rtol=1e-5, atol=1e-6)


def test_parameter_objects_survive_to_and_back():
    m = nn.Linear(3, 4)
    weight, bias = m.weight, m.bias
    m.to("openreg")
    assert m.weight is weight and m.bias is bias and weight.device.type == "openreg"
    m.to("cpu")
    assert m.weight is weight and weight.device.type == "cpu"


def test_an_optimizer_built_before_to_steps_the_live_parameters():
    torch.manual_seed(1)
    m = nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m.to("openreg")
    before = m.weight.detach().cpu().clone()
    m(torch.randn(3, 4, device="openreg")).sum().backward()
    opt.step()
    assert not torch.equal(m.weight.detach().cpu(), before)
    assert opt.param_groups[0]["params"][0] is m.weight


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.LazyLinear(5), (2, 7)),
    (lambda: nn.LazyConv2d(4, 3), (1, 2, 6, 6)),
    (lambda: nn.LazyBatchNorm1d(), (4, 3)),
])
def test_lazy_modules_materialise_on_the_device(make, shape):
    torch.manual_seed(2)
    m = make().to("openreg")
    y = m(torch.randn(shape, device="openreg"))
    assert y.device.type == "openreg"
    assert all(p.device.type == "openreg" for p in m.parameters())


def test_state_dict_round_trips():
    torch.manual_seed(3)
    src = TiedLM().to("openreg")
    state = src.state_dict()
    assert all(t.device.type == "openreg" for t in state.values())
    dst = TiedLM()
    dst.load_state_dict({k: v.cpu() for k, v in state.items()})
    dst.to("openreg")
    assert dst.lm_head.weight is dst.wte.weight
    for k, v in dst.state_dict().items():
        assert torch.equal(v.cpu(), state[k].cpu()), k
