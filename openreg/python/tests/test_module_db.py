"""PyTorch's own module database (`module_db`: the modules and inputs PyTorch tests every
`torch.nn` module with) on the device: each module's training-mode forward and backward, in
float32, against CPU, with no operator reaching the CPU fallback."""

import copy
import re
import warnings

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_leaves, tree_map

MODULES = {info.name: info for info in module_db}

# Modules that draw random numbers: the device's generator is not the CPU's, so only shapes,
# dtypes and the fallback are compared.
RANDOM = {"nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d"}



def to(tree, device):
    return tree_map(lambda t: t.detach().to(device).requires_grad_(t.requires_grad)
                    if isinstance(t, torch.Tensor) else t, tree)


def run(module, args, kwargs):
    """Forward and backward; the outputs, the inputs' gradients and the parameters' gradients."""
    torch.manual_seed(0)
    out = module(*args, **kwargs)
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
    grads = [o for o in outs if o.requires_grad]
    if grads:  # a weighted sum, so that every output element has its own gradient
        weight = [(1.0 + torch.arange(o.numel()) % 3).reshape(o.shape).to(o.device) for o in grads]
        sum((o.float() * w).sum() for o, w in zip(grads, weight)).backward()
    inputs = [t.grad for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.grad is not None]
    params = [p.grad for p in module.parameters() if p.grad is not None]
    return [t.detach().cpu() for t in outs + inputs + params]


# ANCHOR: test
@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_cpu_without_the_fallback(name):
    info = MODULES[name]
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                      training=True)
    reached = set()
    for sample in samples:
        if sample.forward_input is None:
            continue
        args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            module = info.module_cls(*args, **kwargs).train()
            inputs = (sample.forward_input.args, sample.forward_input.kwargs)
            if name.startswith("nn.Lazy"):
                # Materialise on CPU first: the twin must start from the same weights.
                with torch.no_grad():
                    module(*to(inputs, "cpu")[0], **to(inputs, "cpu")[1])
            twin = copy.deepcopy(module).to("openreg")
            try:
                want = run(module, *to(inputs, "cpu"))
            except RuntimeError as error:
                # An input module_db gets wrong for float32 (FractionalMaxPool's float64
                # samples): the device raises CPU's error.
                with pytest.raises(RuntimeError, match=re.escape(str(error).splitlines()[0])):
                    run(twin, *to(inputs, "openreg"))
                continue
            torch.openreg.reset_fallback_counts()
            got = run(twin, *to(inputs, "openreg"))
            reached |= set(torch.openreg.fallback_counts())
        assert len(got) == len(want), sample.desc
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (sample.desc, i)
            if name not in RANDOM:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True, msg=f"{sample.desc} [{i}]")
    assert reached == set()
# ANCHOR_END: test
