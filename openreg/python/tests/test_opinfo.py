"""PyTorch's own OpInfo samples against openreg, for every operator with a native kernel.

This is PyTorch's device-generic test machinery used as a vendor would: `op_db` describes
each operator (its sample inputs, dtypes, autograd support), `@ops` makes one test per
operator and dtype, and `instantiate_device_type_tests` instantiates the tests for the
PrivateUse1 test base, which names itself after our device. Each sample runs on openreg
and on the CPU; results and gradients must agree.
"""

# ANCHOR: setup
import collections
import json
import os
import unittest

import torch
from torch.testing._internal.common_device_type import (
    OpDTypes,
    PrivateUse1TestBase,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_flatten, tree_map


def native_operators():
    """aten names with an openreg kernel, from the dispatcher's own table."""
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return {r.split("::", 1)[1].split(".")[0] for r in registered if r.startswith("aten::")}


def reaches_native_kernel(op, native):
    # softmax reaches _softmax, nll_loss reaches nll_loss_forward: composite operators count
    # when the kernel they decompose to is ours.
    name = op.aten_name or op.name
    return bool({name, f"_{name}", f"{name}_forward"} & native)


NATIVE = native_operators()
OPS = [op for op in op_db if reaches_native_kernel(op, NATIVE)]
# ANCHOR_END: setup

# Gradients whose CPU result is itself ill-conditioned. pow's gradient with respect to a
# broadcast exponent sums terms near 1e8 that cancel to about 1e4: a one-ulp difference in
# log() (libm's here, Sleef's on CPU) shows at 1e-5 relative, either side of float64's answer.
BACKWARD_TOLERANCES = {"pow": dict(rtol=5e-5, atol=1e-5)}

# ANCHOR: skips
# Every skip, with its reason. Keys are OpInfo full names (name.variant).
SKIPS = {
    "empty": "returns uninitialised memory: no values to compare",
    "empty_strided": "returns uninitialised memory: no values to compare",
    "nn.functional.dropout": "random: CPU and device draw from different generators",
    "nn.functional.scaled_dot_product_attention": "samples include dropout, which is random",
    **{name: "random: the device draws Philox numbers, CPU a Mersenne Twister (statistics: test_random.py)"
       for name in ["normal", "normal.number_mean", "normal.in_place", "bernoulli", "multinomial", "uniform",
                    "cauchy", "exponential", "geometric", "log_normal", "randint", "randint_like", "rand_like",
                    "randn_like", "nn.functional.dropout2d", "nn.functional.dropout3d",
                    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
                    "nn.functional.rrelu"]
       if name in {op.full_name for op in op_db}},
}
PrivateUse1TestBase.set_test_configs(op_overrides={
    name: [DecorateInfo(unittest.skip(reason), "TestOpInfo")] for name, reason in SKIPS.items()
})
# ANCHOR_END: skips

# Outputs where CPU's kernel and PyTorch's meta function (which follows CUDA's) disagree; openreg
# gives CPU's, so the fake-tensor test does not compare them. By operator: output index, why.
CPU_NOT_META = {
    "native_batch_norm": {1: "eval statistics: CPU returns empty tensors, meta C elements",
                          2: "the same, for save_invstd"},
    "native_layer_norm": {1: "float16 statistics: CPU's are float16, meta's float32",
                          2: "the same, for rstd"},
}

# Operators whose output size depends on the input's values: fake tracing cannot size them and
# raises DynamicOutputShapeException, for the device as for CPU.
DATA_DEPENDENT = {"masked_select"}

# Sample counts by outcome, written to $OPENREG_OPINFO_REPORT for the Testing chapter.
COUNTS = collections.Counter()


def to_cpu(tree, dtype=None):
    """The same tensors on the CPU, views included: a view keeps its storage, offset,
    strides and conjugate/negative bits (as_strided's samples read outside the view). With `dtype`, floating tensors
    narrower than it are upcast to it (for the reference)."""
    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        c = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().cpu(), t.storage_offset(),
                                                t.size(), t.stride()).detach()
        c = c.conj() if t.is_conj() else c  # the view's bits, too
        c = torch._neg_view(c) if t.is_neg() else c
        if dtype is not None and t.dtype in (torch.float16, torch.bfloat16, torch.float32):
            c = c.to(dtype)
        return c.requires_grad_(t.requires_grad)
    return tree_map(move, tree)


def tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


# ANCHOR: accuracy
def assert_as_accurate_as_cpu(test, actual, expected, reference, dtype):
    """Half-precision results may round differently from CPU's (our kernels compute in
    float32 and round once; some CPU kernels round intermediates). Such a result passes when
    it is, element by element, at least as close to a float64 reference as CPU's is."""
    eps = torch.finfo(dtype).eps
    for a, e, r in zip(tensors(actual), tensors(expected), tensors(reference)):
        a, e, r = a.double(), e.double(), r.double()
        slack = 1e-5 + eps * r.abs()
        ok = ((a - r).abs() <= (e - r).abs() + slack) | (a.isnan() & e.isnan()) | (a == e)
        test.assertTrue(bool(ok.all()), f"openreg is less accurate than CPU:\n{a}\nCPU {e}\nexact {r}")
# ANCHOR_END: accuracy


# ANCHOR: test
class TestOpInfo(TestCase):
    @ops(OPS, dtypes=OpDTypes.supported)
    def test_compare_cpu(self, device, dtype, op):
        self.assertTrue(torch.device(device).type == "openreg")
        for sample in op.sample_inputs(device, dtype):
            # A factory's device is a keyword (torch.eye(3, device=...)): the CPU run gets "cpu".
            cpu_kwargs = {**to_cpu(sample.kwargs), **({"device": "cpu"} if "device" in sample.kwargs else {})}
            expected = op(*to_cpu((sample.input, *sample.args)), **cpu_kwargs)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            try:
                self.assertEqual(to_cpu(actual), expected, exact_device=True)
                COUNTS["forward"] += 1
            except AssertionError:
                if dtype not in (torch.float16, torch.bfloat16):
                    raise
                reference = op(*to_cpu((sample.input, *sample.args), torch.float64),
                               **{**to_cpu(sample.kwargs, torch.float64),
                                  **({"device": "cpu"} if "device" in sample.kwargs else {})})
                assert_as_accurate_as_cpu(self, to_cpu(actual), expected, reference, dtype)
                COUNTS["forward, closer to exact than CPU"] += 1

    @ops([op for op in OPS if op.supports_autograd], dtypes=OpDTypes.supported_backward,
         allowed_dtypes=(torch.float32, torch.float64))
    def test_backward_compare_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
            inputs = (sample.input, *sample.args)
            cpu_inputs, cpu_kwargs = to_cpu(inputs), to_cpu(sample.kwargs)
            leaves = [t for t in tensors((inputs, sample.kwargs)) if t.requires_grad]
            cpu_leaves = [t for t in tensors((cpu_inputs, cpu_kwargs)) if t.requires_grad]
            outputs = [t for t in tensors(op(*inputs, **sample.kwargs)) if t.requires_grad]
            cpu_outputs = [t for t in tensors(op(*cpu_inputs, **cpu_kwargs)) if t.requires_grad]
            if not outputs or not leaves:
                continue
            weights = [torch.randn_like(t) for t in cpu_outputs]
            grads = torch.autograd.grad(outputs, leaves, [w.to(device) for w in weights], allow_unused=True)
            cpu_grads = torch.autograd.grad(cpu_outputs, cpu_leaves, weights, allow_unused=True)
            try:
                self.assertEqual(to_cpu(list(grads)), list(cpu_grads), exact_device=True,
                                 **BACKWARD_TOLERANCES.get(op.name, {}))
                COUNTS["backward"] += 1
            except AssertionError:
                # As for forward results: at least as close to a float64 reference as CPU's.
                ref_inputs, ref_kwargs = to_cpu(inputs, torch.float64), to_cpu(sample.kwargs, torch.float64)
                ref_leaves = [t for t in tensors((ref_inputs, ref_kwargs)) if t.requires_grad]
                ref_outputs = [t for t in tensors(op(*ref_inputs, **ref_kwargs)) if t.requires_grad]
                ref_grads = torch.autograd.grad(ref_outputs, ref_leaves, [w.double() for w in weights],
                                                allow_unused=True)
                assert_as_accurate_as_cpu(self, to_cpu(list(grads)), list(cpu_grads), list(ref_grads), dtype)
                COUNTS["backward, closer to exact than CPU"] += 1


    # ANCHOR: fake
    @ops(OPS, dtypes=OpDTypes.supported, allowed_dtypes=(torch.float32, torch.float16, torch.int64))
    def test_fake_tensors_match_the_device(self, device, dtype, op):
        """torch.compile traces with FakeTensors: each operator's meta function must give the
        shape, strides, dtype and device that the openreg kernel produces."""
        from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

        for sample in op.sample_inputs(device, dtype):
            actual = op(sample.input, *sample.args, **sample.kwargs)
            with FakeTensorMode(allow_non_fake_inputs=False) as mode:
                fake_args = tree_map(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t,
                                     (sample.input, sample.args, sample.kwargs))
                if op.name in DATA_DEPENDENT:
                    with self.assertRaises(DynamicOutputShapeException):
                        op(fake_args[0], *fake_args[1], **fake_args[2])
                    continue
                fake = op(fake_args[0], *fake_args[1], **fake_args[2])
            for k, (real, meta) in enumerate(zip(tensors(actual), tensors(fake))):
                if k in CPU_NOT_META.get(op.name, {}):
                    continue
                self.assertEqual((meta.shape, meta.dtype, meta.device), (real.shape, real.dtype, real.device))
                if real.numel() > 1:
                    self.assertEqual(meta.stride(), real.stride())
            COUNTS["fake"] += 1
    # ANCHOR_END: fake


instantiate_device_type_tests(TestOpInfo, globals(), only_for="openreg")
# ANCHOR_END: test


def tearDownModule():
    report = os.environ.get("OPENREG_OPINFO_REPORT")
    if report:
        summary = {"native_operators": sorted(NATIVE), "opinfos": sorted({op.full_name for op in OPS}),
                   "samples": dict(COUNTS), "skips": SKIPS}
        with open(report, "w") as f:
            json.dump(summary, f, indent=1)
