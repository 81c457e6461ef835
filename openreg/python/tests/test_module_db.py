"""PyTorch's own module database (`module_db`: the modules and inputs PyTorch tests every
`torch.nn` module with) on the device: each module's training-mode forward and backward, in
float32, against CPU; and the operators each module still sends to the CPU fallback, pinned
per module, so that the list shrinks only on purpose and never grows unnoticed."""

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

# ANCHOR: fallback
# The operators a module's forward and backward still send to the CPU fallback. A module not
# listed reaches none.
FALLBACK = {
    "nn.AdaptiveAvgPool3d": {"aten::_adaptive_avg_pool3d", "aten::_adaptive_avg_pool3d_backward"},
    "nn.AdaptiveMaxPool1d": {"aten::adaptive_max_pool2d.out", "aten::adaptive_max_pool2d_backward.grad_input"},
    "nn.AdaptiveMaxPool2d": {"aten::adaptive_max_pool2d.out", "aten::adaptive_max_pool2d_backward.grad_input"},
    "nn.AdaptiveMaxPool3d": {"aten::adaptive_max_pool3d.out", "aten::adaptive_max_pool3d_backward.grad_input"},
    "nn.AvgPool3d": {"aten::avg_pool3d.out", "aten::avg_pool3d_backward.grad_input"},
    "nn.CELU": {"aten::elu", "aten::elu_backward"},
    "nn.CTCLoss": {"aten::_ctc_loss", "aten::_ctc_loss_backward"},
    "nn.LPPool3d": {"aten::avg_pool3d.out", "aten::avg_pool3d_backward.grad_input"},
    "nn.LinearCrossEntropyLoss": {"aten::index_add.out", "aten::masked_select"},
    "nn.LocalResponseNorm": {"aten::avg_pool3d.out", "aten::avg_pool3d_backward.grad_input"},
    "nn.MaxPool3d": {"aten::max_pool3d_with_indices", "aten::max_pool3d_with_indices_backward"},
    "nn.MultiLabelMarginLoss": {"aten::multilabel_margin_loss_forward", "aten::multilabel_margin_loss_backward"},
    "nn.MultiMarginLoss": {"aten::multi_margin_loss", "aten::multi_margin_loss_backward"},
    "nn.ReflectionPad1d": {"aten::reflection_pad1d.out", "aten::reflection_pad1d_backward.grad_input"},
    "nn.ReflectionPad2d": {"aten::reflection_pad2d", "aten::reflection_pad2d_backward"},
    "nn.ReflectionPad3d": {"aten::reflection_pad3d.out", "aten::reflection_pad3d_backward.grad_input"},
    "nn.ReplicationPad1d": {"aten::replication_pad1d.out", "aten::replication_pad1d_backward.grad_input"},
    "nn.ReplicationPad2d": {"aten::replication_pad2d.out", "aten::replication_pad2d_backward"},
    "nn.ReplicationPad3d": {"aten::replication_pad3d.out", "aten::replication_pad3d_backward"},
}
# ANCHOR_END: fallback


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
def test_module_matches_cpu_and_reaches_only_its_known_fallback(name):
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
    assert reached == FALLBACK.get(name, set())
# ANCHOR_END: test
