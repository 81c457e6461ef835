"""PyTorch's operator contract, held against openreg for every entry of `op_db`.

A vendor's kernels are checked against CPU by their own tests; what those tests miss is the
contract every PyTorch operator keeps whatever computes it: the errors it raises, how it treats
`out=`, aliasing, mixed devices and dtypes, and the metadata its fake (meta) implementation
promises to torch.compile. PyTorch describes that contract in `op_db` (OpInfo) and checks it
with device-generic tests. This suite runs those checks on openreg, for every operator, the CPU
fallback included:

- `TestCommon` repeats four tests of PyTorch's `test/test_ops.py` under their names
  (`test_errors`, `test_out`, `test_out_warning`, `test_noncontiguous_samples`). OpInfo entries
  carry the expected failures PyTorch knows for those names on every device; a device that
  behaves like CPU inherits them unchanged.
- `TestConformance` adds what a second device needs: results equal to CPU's in every dtype CPU
  supports, forward and backward; `out=` or in-place operands that overlap an input, and `out=`
  on another device; operands on two devices; the dtypes only CUDA supports; fake tensors
  that agree with the device for every operator a sample reaches.

Every exclusion is in EXCLUDED below, with its reason, and reaches PyTorch's machinery through
`PrivateUse1TestBase.set_test_configs`. Where a check samples, SAMPLING says how.
"""

# ANCHOR: setup
import contextlib
import copy
import dataclasses
import itertools
import math
import re
import unittest
import warnings
from functools import partial

import torch
from torch._subclasses.fake_utils import CrossRefFakeMode
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import (
    OpDTypes,
    PrivateUse1TestBase,
    instantiate_device_type_tests,
    ops,
    tol,
    toleranceOverride,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal import common_utils
from torch.testing._internal.common_utils import TestCase, is_iterable_of_tensors, noncontiguous_like
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

DEVICE = "openreg"
# ANCHOR_END: setup


# ANCHOR: native
def native_operators():
    """aten names with an openreg kernel, from the dispatcher's own table."""
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return {r.split("::", 1)[1].split(".")[0] for r in registered if r.startswith("aten::")}


def reaches_native_kernel(op, native=native_operators()):
    # softmax reaches _softmax, nll_loss reaches nll_loss_forward: composite operators count
    # when the kernel they decompose to is ours.
    name = op.aten_name or op.name
    return bool({name, f"_{name}", f"{name}_forward"} & native)
# ANCHOR_END: native


# ANCHOR: sampling
# The suite runs inside `make test`. An entry that reaches one of our kernels is checked on
# every sample in every dtype; an entry served by the CPU fallback runs CPU's own kernel, so
# after its primary dtypes (all samples) a few samples per dtype, spread over the list, show
# that the fallback carries each dtype across. The rule is fixed: the same samples every run.
PRIMARY_DTYPES = (torch.float32, torch.int64, torch.bool)
SPREAD = 4          # samples per other dtype, for an entry the fallback serves
NATIVE_SPREAD = 8   # samples per other dtype, for an entry that reaches a kernel of ours
PRIMARY_CAP = 256   # samples per primary dtype at most (max_pool2d has 1440)
# The fake-tensor check compares metadata, which a few shapes exercise: FAKE_SPREAD samples of
# every entry (float32; the entries with our kernels also in float16 and int64).
FAKE_SPREAD = 6


def spread(samples, count):
    if len(samples) <= count:
        return samples
    step = len(samples) / count
    return [samples[int(k * step)] for k in range(count)]


def samples_to_check(op, dtype, samples, compare=False):
    """The samples a check runs; with `compare`, none whose result is random."""
    samples = list(samples)
    if compare and op.full_name in RANDOM_SAMPLES:
        samples = [s for s in samples if not RANDOM_SAMPLES[op.full_name](s)]
    if dtype in PRIMARY_DTYPES:
        return spread(samples, PRIMARY_CAP)
    return spread(samples, NATIVE_SPREAD if reaches_native_kernel(op) else SPREAD)
# ANCHOR_END: sampling


# ANCHOR: excluded
# Every exclusion, with its reason, in one place; test_random_entries_draw_other_numbers_than_cpu
# checks that each random one is needed.
RANDOM = {
    "normal", "normal.number_mean", "normal.in_place", "bernoulli", "multinomial", "uniform", "cauchy",
    "exponential", "geometric", "log_normal", "randint", "randint_like", "rand_like", "randn", "randn_like",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu", "svd_lowrank", "pca_lowrank",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
}
RANDOM_REASON = ("random: the device draws Philox numbers, CPU a Mersenne Twister; the statistics are "
                 "checked in test_random.py")
# Entries whose samples are random only with some arguments (dropout): those samples are not
# compared with CPU.
RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": lambda s: s.kwargs.get("dropout_p", 0.0) > 0,
    "nn.functional.multi_head_attention_forward": lambda s: s.kwargs.get("training", True) and s.args[9] > 0,
}
UNINITIALISED = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "empty_permuted"}
# Sparse layouts: openreg registers no SparsePrivateUse1 kernels; the dispatcher's
# NotImplementedError names the backend (test_sparse_layouts_are_refused).
SPARSE = {"to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce"}
EXCLUDED = {
    **{(name, test): RANDOM_REASON for name in RANDOM
       for test in ("test_compare_cpu", "test_backward_compare_cpu")},
    **{(name, "test_compare_cpu"): "returns uninitialised memory: no values to compare" for name in UNINITIALISED},
    **{(name, test): "sparse layouts: openreg has none (test_sparse_layouts_are_refused)" for name in SPARSE
       for test in ("test_compare_cpu", "test_backward_compare_cpu", "test_fake_tensors_match_the_device",
                    "test_mixed_devices", "test_noncontiguous_samples", "test_out", "test_out_warning")},
}
# ANCHOR_END: excluded

# ANCHOR: tolerances
# Gradients held to a looser tolerance than assertEqual's, each with its reason.
BACKWARD_TOLERANCES = {
    ("pow", torch.float32): (dict(atol=1e-5, rtol=5e-5),
        "the gradient with respect to a broadcast exponent sums terms near 1e8 that cancel to about 1e4: a "
        "one-ulp difference in log() (libm's here, Sleef's on CPU) shows at 1e-5 relative, either side of "
        "float64's answer"),
    ("nn.functional.scaled_dot_product_attention", torch.float32): (dict(atol=1e-3, rtol=1e-4),
        "the backward recomputes the probabilities from the saved log-sum-exp and takes rowsum(dO * O) from "
        "the saved output, as flash attention does on CUDA; the samples' scores reach about 100, and one ulp "
        "of them is 1e-5 relative in the gradient (test_ops.py grants CUDA 1e-3 against CPU)"),
    ("linalg.householder_product", torch.float32): (dict(atol=2e-2, rtol=1e-3),
        "an ill-conditioned composite (products of reflections and their inverses): CPU's own error is 1e-4 "
        "of the largest gradient; ours, through other matrix products, is within 1e-3"),
}
# Tolerances for TestCommon's comparisons of the device with itself.
COMMON_TOLERANCES = {
    ("cdist", "test_noncontiguous_samples"): ({torch.float32: tol(atol=1e-4, rtol=2e-5)},
        "the gradient of a broadcast input sums terms that cancel (to 2 from terms near 1e3); a sum walks "
        "memory in its operand's order, as CPU's does, so a non-contiguous copy rounds otherwise"),
}
# test_noncontiguous_samples's gradients, where op_db's own decorator for CPU (carried over)
# would hold them tighter than op_db holds CUDA's.
NONCONTIGUOUS_GRAD_TOLERANCES = {
    ("matmul", torch.float32): (dict(atol=1e-4, rtol=0),
        "the gradient of an input broadcast over a batch sums the batch's products, and a non-contiguous copy "
        "reaches the matrix kernel in another order: 4e-5 apart on values that cancel from terms near 10 "
        "(op_db grants CUDA and XPU atol=1e-4 here)"),
}
# ANCHOR_END: tolerances

# ANCHOR: cpu_expectations
# What PyTorch records about CPU for TestCommon's tests (an expected failure, a tolerance, a
# skip, op_db's DecorateInfo with device_type="cpu") holds for openreg too wherever the CPU
# fallback runs CPU's kernel: each is carried over. Where a kernel of ours behaves better, the
# expected failure turns into an unexpected success, and the test says so.
COMMON_TESTS = ("test_errors", "test_out", "test_out_warning", "test_noncontiguous_samples")
# Expected failures PyTorch records (for CPU, or for every device) that openreg's kernels do
# not have: the check passes here, and the expected failure is dropped, with the reason.
PASSES_WHERE_PYTORCH_EXPECTS_FAILURE = {
    ("nn.functional.avg_pool3d", "test_out"): "CPU's expected failure; openreg's avg_pool3d kernel keeps out='s "
                                                "strides",
    ("randn", "test_out"): "CPU's expected failure (its draws depend on out='s strides); the device's Philox "
                           "draws do not",
    ("nn.functional.logsigmoid", "test_out_warning"): "CPU's expected failure; openreg's log_sigmoid resizes its "
                                                      "outputs with the warning",
}


def is_expected_failure(d):
    return isinstance(d, DecorateInfo) and unittest.expectedFailure in d.decorators


CPU_DECORATORS = {
    op.full_name: [DecorateInfo(d.decorators, "TestCommon", d.test_name, dtypes=d.dtypes, active_if=d.active_if)
                   for d in op.decorators if isinstance(d, DecorateInfo) and d.cls_name == "TestCommon"
                   and d.test_name in COMMON_TESTS and d.device_type == "cpu"
                   and not (is_expected_failure(d) and (op.full_name, d.test_name) in PASSES_WHERE_PYTORCH_EXPECTS_FAILURE)]
    for op in op_db
}


def common_ops():
    """op_db for TestCommon: copies of the entries whose device-generic expected failures
    openreg does not have (PASSES_WHERE_PYTORCH_EXPECTS_FAILURE), without those."""
    out = []
    for op in op_db:
        drop = {test for (name, test) in PASSES_WHERE_PYTORCH_EXPECTS_FAILURE if name == op.full_name}
        if drop:
            op = copy.copy(op)
            op.decorators = tuple(d for d in op.decorators
                                  if not (is_expected_failure(d) and d.cls_name == "TestCommon" and d.test_name in drop
                                          and d.device_type in (None, "cpu")))
        out.append(op)
    return out


COMMON_OPS = common_ops()
# ANCHOR_END: cpu_expectations

# ANCHOR: set_test_configs
PrivateUse1TestBase.set_test_configs(op_overrides={
    name: [DecorateInfo(unittest.skip(reason), test_name=test) for (n, test), reason in EXCLUDED.items() if n == name]
    + [DecorateInfo(toleranceOverride(t), "TestCommon", test) for (n, test), (t, _) in COMMON_TOLERANCES.items()
       if n == name]
    + CPU_DECORATORS.get(name, [])
    for name in {n for n, _ in EXCLUDED} | {n for n, _ in COMMON_TOLERANCES} | {n for n, d in CPU_DECORATORS.items() if d}
})
# ANCHOR_END: set_test_configs

# ANCHOR: allowed
# Operands that may be on the CPU beside openreg tensors, by entry: (flat positions of the
# sample's tensors, why CUDA accepts them too).
MIXED_DEVICES_ALLOWED = {
    **{name: (range(8), "uses only the other tensor's shape, whatever its device")
       for name in ["expand_as", "view_as", "reshape_as", "broadcast_tensors", "resize_as_"]},
    **{name: (range(2), "clone() and copy_(): copy_ copies across devices on CUDA too")
       for name in ["as_strided_scatter", "diagonal_scatter", "select_scatter", "slice_scatter"]},
    "tensor_split": ((1,), "the split indices must be a CPU tensor"),
    "index_put": ((1,), "indices may be on the CPU: indexing moves them, as CUDA's does"),
    "_unsafe_masked_index": ((2, 3), "indices may be on the CPU: indexing moves them, as CUDA's does"),
    "_unsafe_masked_index_put_accumulate": ((2, 3), "indices may be on the CPU: indexing moves them, as CUDA's does"),
    "nn.functional.ctc_loss": (range(4), "ctc_loss moves the targets to the log-probabilities' device, whichever "
                               "it is (cuDNN's CTC needs CPU targets)"),
}

# Operators the fake-tensor cross-check leaves out, each with its reason.
FAKE_IGNORED = {
    torch.ops.aten._ctc_loss_backward.default: "PyTorch registers no fake or meta kernel for it (every device)",
}
# ANCHOR_END: allowed


def cpu_twin(tree, dtype=None):
    """The same tensors on the CPU, aliasing included: tensors that share a device storage share
    one CPU storage, with the same offsets, strides and conjugate/negative bits. With `dtype`,
    floating tensors narrower than it are upcast to it (a reference)."""
    storages = {}

    def move(t):
        if not isinstance(t, torch.Tensor) or t.device.type != DEVICE:
            return t
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in storages:
            storages[key] = t.untyped_storage().cpu()
        c = torch.empty(0, dtype=t.dtype).set_(storages[key], t.storage_offset(), t.size(), t.stride())
        c = c.conj() if t.is_conj() else c
        c = torch._neg_view(c) if t.is_neg() else c
        if dtype is not None and t.dtype in (torch.float16, torch.bfloat16, torch.float32):
            c = c.to(dtype)
        return c.detach().requires_grad_(t.requires_grad)

    return tree_map(move, tree)


def tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def call(op, sample, **extra):
    return op(sample.input, *sample.args, **{**sample.kwargs, **extra})


def seeded_call(op, sample, **extra):
    """call(), seeded: a random operator draws the same numbers each time."""
    common_utils.set_rng_seed(0)
    return call(op, sample, **extra)


def call_on_cpu(op, sample, dtype=None, **extra):
    inputs, kwargs = cpu_twin(((sample.input, *sample.args), {**sample.kwargs, **extra}), dtype)
    if "device" in kwargs:  # a factory: the CPU run makes CPU tensors
        kwargs["device"] = "cpu"
    if op.full_name in DEVICE_POLICY:
        kwargs = DEVICE_POLICY[op.full_name](sample, kwargs)
    return op(*inputs, **kwargs)


def accumulation_policy_of_the_device(sample, kwargs):
    """linear_cross_entropy accumulates 16-bit floats in float32 on the CPU only ("accurate";
    torch/nn/modules/linear_cross_entropy_options.py, _auto_acc_policy): CPU is asked for the
    policy the device gets ("compact"), so it computes the same thing."""
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions, _auto_acc_policy
    options = kwargs.get("options") or LinearCrossEntropyOptions()
    if options.acc_policy == "auto":
        kwargs["options"] = dataclasses.replace(options, acc_policy=_auto_acc_policy(DEVICE, sample.input.dtype))
    return kwargs


# Entries for which torch itself computes differently off the CPU: the CPU reference is told
# to take the device's branch.
DEVICE_POLICY = {name: accumulation_policy_of_the_device for name in (
    "nn.functional.linear_cross_entropy", "nn.functional.linear_cross_entropy.chunked",
    "nn.functional.linear_cross_entropy.chunked_none")}


# Entries whose order among equal elements is unspecified unless `stable=True` is asked for
# (CPU's unstable sort and its partial sort for topk order ties their own way): their indices
# are compared through the values they select.
TIE_ORDER_FREE = {"sort", "argsort", "topk"}


def canonical(op, sample, result):
    """The result to compare: for TIE_ORDER_FREE entries without stable=True, the indices'
    values instead of the indices."""
    if op.full_name not in TIE_ORDER_FREE or sample.kwargs.get("stable"):
        return result
    source = cpu_twin(sample.input)
    if source.dim() == 0:
        return result
    if op.full_name == "topk":
        dim = sample.kwargs.get("dim", sample.args[1] if len(sample.args) > 1 else -1)
    else:
        dim = sample.kwargs.get("dim", sample.args[0] if sample.args else -1)
    if op.full_name == "argsort":
        return source.gather(dim, result)
    values, indices = result
    return values, source.gather(dim, indices)


def cpu_or(tree, device):
    """Tensors of `tree` on `device` if that is the CPU (a sample is made on openreg)."""
    return cpu_twin(tree) if torch.device(device).type == "cpu" else tree


def outcome(fn):
    try:
        return fn()
    except Exception as e:  # the exception is the result to compare
        return e


# ANCHOR: accuracy
def assert_as_accurate_as_cpu(test, actual, expected, reference, dtype):
    """Half-precision results may round differently from CPU's (our kernels compute in
    float32 and round once; some CPU kernels round intermediates). Such a result passes when
    it is, element by element, at least as close to a float64 reference as CPU's is."""
    eps = torch.finfo(dtype).eps
    for a, e, r in zip(tensors(actual), tensors(expected), tensors(reference)):
        if not (a.is_floating_point() or a.is_complex()):
            test.assertEqual(a, e)
            continue
        a, e, r = (t.to(torch.complex128 if t.is_complex() else torch.float64) for t in (a, e, r))
        slack = 1e-5 + eps * r.abs()
        both_nan = a.isnan() & e.isnan()
        ok = ((a - r).abs() <= (e - r).abs() + slack) | both_nan | (a == e)
        if bool(ok.all()):
            continue
        # A sum of many terms rounds differently in every order: then the largest error must be
        # of CPU's size (twice it, plus an ulp of the largest exact value).
        finite = ~both_nan
        ours, cpus = (a - r)[finite].abs().max(), (e - r)[finite].abs().max()
        scale = r[finite].abs().max() if finite.any() else torch.tensor(0.0)
        test.assertTrue(bool(ours <= 2 * cpus + 2 * eps * scale + 1e-5),
                        f"openreg is less accurate than CPU: largest error {ours:.3g} against CPU's {cpus:.3g} "
                        f"(largest exact value {scale:.3g})\n{a}\nCPU {e}\nexact {r}")
# ANCHOR_END: accuracy


# ANCHOR: cuda_dtypes
def cuda_only_dtypes(op):
    return sorted(set(op.supported_dtypes("cuda")) - set(op.supported_dtypes("cpu")), key=str)


# (entry, dtype) CUDA supports, CPU does not, and openreg computes: the dtype CPU computes the
# reference in. Every other such pair must raise NotImplementedError naming openreg.
CUDA_DTYPES_COMPUTED = {
    # The device's own kernels: histc counts integers (kernels/histogram.rs), abs keeps bools.
    **{("histc", t): torch.float64 for t in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)},
    ("abs", torch.bool): torch.uint8,
    ("nn.functional.softsign", torch.bool): torch.uint8,
    # Kernels that compute 16-bit floats in float32 and round once, as CUDA's do.
    ("round.decimals_3", torch.float16): torch.float32,
    ("round.decimals_neg_3", torch.float16): torch.float32,
    **{(f"polygamma.polygamma_n_{n}", torch.float16): torch.float32 for n in range(1, 5)},
    **{(name, t): torch.float32 for name in ("nn.functional.avg_pool3d", "nn.functional.multi_margin_loss",
                                             "nn.functional.multilabel_margin_loss")
       for t in (torch.float16, torch.bfloat16)},
    # Complex32 carried through: diag moves elements; the convolutions compute in complex64.
    ("diag", torch.complex32): torch.complex64,
    **{(f"nn.functional.conv{t}{d}", torch.complex32): torch.complex64 for t in ("", "_transpose") for d in ("1d", "2d", "3d")},
}


def is_clear_dtype_error(error, dtype):
    """A RuntimeError (NotImplementedError is one) that says openreg cannot compute the dtype,
    or names the dtype without blaming a CPU kernel the user never called."""
    if not isinstance(error, RuntimeError):
        return False
    message = str(error)
    name = {torch.complex32: "ComplexHalf", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int8: "Char",
            torch.uint8: "Byte", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
            torch.bool: "Bool"}.get(dtype, str(dtype).removeprefix("torch."))
    return "openreg" in message or (name in message and "cpu" not in message.lower())
# ANCHOR_END: cuda_dtypes


class TestCommon(TestCase):
    """Four tests of PyTorch's test/test_ops.py, by name, on openreg."""

    # ANCHOR: errors
    @ops([op for op in COMMON_OPS if op.error_inputs_func is not None], dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        for error in op.error_inputs(device):
            s = error.sample_input
            with self.assertRaisesRegex(error.error_type, error.error_regex):
                result = call(op, s)
                self.assertFalse(isinstance(result, type(NotImplemented)))

    # ANCHOR_END: errors

    @ops(COMMON_OPS, dtypes=OpDTypes.any_one)
    def test_out(self, device, dtype, op):
        """out= keeps PyTorch's rules: the values of `out` do not matter, its strides and
        storage are kept, an empty `out` is resized without a warning, an `out` on another
        device or of a dtype the result cannot be cast to is an error."""
        for sample in samples_to_check(op, dtype, op.sample_inputs(device, dtype)):
            expected = call(op, sample)
            if not isinstance(expected, torch.Tensor) and not is_iterable_of_tensors(expected, include_empty=True):
                self.skipTest("the operator returns neither a tensor nor tensors")
            if not op.supports_out:
                with self.assertRaises(Exception):
                    assert call(op, sample, out=expected) != NotImplemented
                return

            def each(fn, out=expected):
                return fn(out) if isinstance(out, torch.Tensor) else tuple(map(fn, out))

            def check(make, keep_layout):
                out = each(make)
                strides = each(lambda t: t.stride(), out)
                storages = each(lambda t: t.untyped_storage().data_ptr(), out)
                call(op, sample, out=out)
                self.assertEqual(expected, out)
                if keep_layout:
                    self.assertEqual(strides, each(lambda t: t.stride(), out), msg="out='s strides changed")
                    self.assertEqual(storages, each(lambda t: t.untyped_storage().data_ptr(), out),
                                     msg="out= was given new storage")

            def extremal(t):
                is_int = not (t.dtype.is_floating_point or t.dtype.is_complex)
                return torch.full_like(t, torch.iinfo(t.dtype).max if is_int and t.dtype != torch.bool else
                                       (True if t.dtype == torch.bool else math.nan))

            check(extremal, keep_layout=True)
            check(lambda t: make_tensor(t.shape, dtype=t.dtype, device=t.device, noncontiguous=True),
                  keep_layout=True)
            check(lambda t: make_tensor((0,), dtype=t.dtype, device=t.device), keep_layout=False)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call(op, sample, out=each(lambda t: make_tensor((0,), dtype=t.dtype, device=t.device)))
            self.assertFalse(any("An output with one or more elements" in str(w.message) for w in caught),
                             "an empty out= was resized with a warning")
            on_cpu = each(lambda t: make_tensor(t.shape, dtype=t.dtype, device="cpu"))
            if op.is_factory_function and sample.kwargs.get("device") is None:
                call(op, sample, out=on_cpu)
            else:
                with self.assertRaises(RuntimeError, msg="out= on the CPU for an openreg operator"):
                    call(op, sample, out=on_cpu)
            floating = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
            if any(t.dtype in floating for t in tensors(expected)):
                # An unsafe cast into out= is refused (cat's check raises a TypeError), except
                # by a factory not told its dtype.
                long_out = each(lambda t: make_tensor(t.shape, dtype=torch.long, device=t.device))
                if op.is_factory_function and sample.kwargs.get("dtype") is None:
                    call(op, sample, out=long_out)
                else:
                    with self.assertRaises((RuntimeError, TypeError), msg="an unsafe cast into out="):
                        call(op, sample, out=long_out)

    @ops(COMMON_OPS, dtypes=OpDTypes.none)
    def test_out_warning(self, device, op):
        """A non-empty out= of the wrong shape is resized, with PyTorch's warning."""
        supported = op.supported_dtypes(self.device_type)
        if not supported:
            self.skipTest("no dtype on this device")
        dtype = torch.float32 if torch.float32 in supported else next(iter(supported))
        for sample in samples_to_check(op, dtype, op.sample_inputs(device, dtype)):
            expected = call(op, sample)
            if not isinstance(expected, torch.Tensor) and not is_iterable_of_tensors(expected, include_empty=True):
                self.skipTest("the operator returns neither a tensor nor tensors")
            if not op.supports_out:
                with self.assertRaises(Exception):
                    assert call(op, sample, out=expected) != NotImplemented
                return

            def wrong_shape(t):
                shape = list(t.shape) or [1]
                shape[-1] += 1
                return make_tensor(shape, dtype=t.dtype, device=t.device)

            out = wrong_shape(expected) if isinstance(expected, torch.Tensor) else tuple(map(wrong_shape, expected))
            call(op, sample, out=out)
            self.assertEqual(expected, out)
            out = wrong_shape(expected) if isinstance(expected, torch.Tensor) else tuple(map(wrong_shape, expected))
            if any(t.numel() > 0 for t in tensors(out)):
                with self.assertWarnsRegex(UserWarning, "An output with one or more elements"):
                    call(op, sample, out=out)

    @ops(COMMON_OPS, allowed_dtypes=(torch.float32, torch.long, torch.complex64))
    def test_noncontiguous_samples(self, device, dtype, op):
        """The same values, forward and backward, from non-contiguous copies of the inputs."""
        grad = dtype in op.supported_backward_dtypes(torch.device(device).type)
        for sample in samples_to_check(op, dtype, op.sample_inputs(device, dtype, requires_grad=grad)):
            other = sample.noncontiguous()
            expected, actual = call(op, sample), call(op, other)
            self.assertEqual(actual, expected)
            if not grad:
                continue
            expected = [t for t in tensors(sample.output_process_fn_grad(expected)) if t.requires_grad]
            actual = [t for t in tensors(other.output_process_fn_grad(actual)) if t.requires_grad]
            leaves = [t for t in tensors((sample.input, sample.args)) if t.requires_grad]
            other_leaves = [t for t in tensors((other.input, other.args)) if t.requires_grad]
            if not expected or not leaves:
                continue
            weights = [torch.randn_like(t) for t in expected]
            grads = torch.autograd.grad(expected, leaves, weights, allow_unused=True)
            other_grads = torch.autograd.grad(actual, other_leaves, [noncontiguous_like(w) for w in weights],
                                              allow_unused=True)
            self.assertEqual(other_grads, grads, **NONCONTIGUOUS_GRAD_TOLERANCES.get((op.name, dtype), ({},))[0])


instantiate_device_type_tests(TestCommon, globals(), only_for=DEVICE)


class TestConformance(TestCase):
    """What a second device adds to PyTorch's own checks: agreement with CPU."""

    # ANCHOR: compare
    @ops(op_db, dtypes=OpDTypes.none)
    def test_compare_cpu(self, device, op):
        """Every dtype CPU supports: the device's results are CPU's (floating point: or closer
        to a float64 reference), and so are its exceptions. One test per entry, its dtypes in
        turn (a test per dtype would spend more time in the harness than in the operators)."""
        for dtype in sorted(op.supported_dtypes("cpu"), key=str):
            with self.subTest(dtype=dtype):
                self.compare_cpu(device, dtype, op)

    def compare_cpu(self, device, dtype, op):
        for sample in samples_to_check(op, dtype, op.sample_inputs(device, dtype), compare=True):
            expected = outcome(lambda: call_on_cpu(op, sample))
            actual = outcome(lambda: call(op, sample))
            if isinstance(expected, Exception) or isinstance(actual, Exception):
                self.assertEqual(type(actual), type(expected), msg=f"{dtype}: CPU: {expected!r}\nopenreg: {actual!r}")
                continue
            actual, expected = canonical(op, sample, cpu_twin(actual)), canonical(op, sample, cpu_twin(expected))
            try:
                self.assertEqual(actual, expected, msg=str(dtype))
            except AssertionError:
                if not (dtype.is_floating_point or dtype.is_complex):
                    raise
                reference = canonical(op, sample, cpu_twin(call_on_cpu(op, sample, torch.float64)))
                assert_as_accurate_as_cpu(self, actual, expected, reference, dtype)

    # ANCHOR_END: compare

    @ops([op for op in op_db if op.supports_autograd], dtypes=OpDTypes.none)
    def test_backward_compare_cpu(self, device, op):
        """Gradients of every input for a random gradient of every output, against CPU's, in
        float32 and float64."""
        for dtype in (torch.float32, torch.float64):
            if dtype in op.supported_backward_dtypes("cpu"):
                with self.subTest(dtype=dtype):
                    self.backward_compare_cpu(device, dtype, op)

    def backward_compare_cpu(self, device, dtype, op):
        tolerance = BACKWARD_TOLERANCES.get((op.full_name, dtype), ({}, ""))[0]
        for sample in samples_to_check(op, dtype, op.sample_inputs(device, dtype, requires_grad=True), compare=True):
            inputs = (sample.input, *sample.args, sample.kwargs)
            cpu_inputs = cpu_twin(inputs)
            leaves = [t for t in tensors(inputs) if t.requires_grad]
            cpu_leaves = [t for t in tensors(cpu_inputs) if t.requires_grad]
            outputs = [t for t in tensors(sample.output_process_fn_grad(call(op, sample))) if t.requires_grad]
            cpu_outputs = [t for t in tensors(sample.output_process_fn_grad(
                op(*cpu_inputs[:-1], **cpu_inputs[-1]))) if t.requires_grad]
            if not outputs or not leaves:
                continue
            weights = [torch.randn_like(t) for t in cpu_outputs]
            grads = torch.autograd.grad(outputs, leaves, [w.to(device) for w in weights], allow_unused=True)
            cpu_grads = torch.autograd.grad(cpu_outputs, cpu_leaves, weights, allow_unused=True)
            try:
                self.assertEqual(cpu_twin(list(grads)), list(cpu_grads), msg=str(dtype), **tolerance)
            except AssertionError:
                reference = cpu_twin(inputs, torch.float64)
                ref_leaves = [t for t in tensors(reference) if t.requires_grad]
                ref_outputs = [t for t in tensors(sample.output_process_fn_grad(
                    op(*reference[:-1], **reference[-1]))) if t.requires_grad]
                ref_grads = torch.autograd.grad(ref_outputs, ref_leaves, [w.to(o.dtype) for w, o in zip(weights, ref_outputs)],
                                                allow_unused=True)
                assert_as_accurate_as_cpu(self, cpu_twin(list(grads)), list(cpu_grads), list(ref_grads), dtype)

    # ANCHOR: overlap
    @ops([op for op in op_db if op.supports_out or op.inplace_variant is not None], dtypes=OpDTypes.any_one)
    def test_overlap_like_cpu(self, device, dtype, op):
        """An out= or in-place operand that partly overlaps an input: the device refuses it
        exactly when CPU refuses it, given the same aliasing. (Where CPU accepts, the values
        are undefined: PyTorch does not define the order of overlapping writes.)"""
        tried = 0
        for sample in op.sample_inputs(device, dtype):
            if tried >= 3:
                break
            if not isinstance(sample.input, torch.Tensor) or sample.input.numel() < 2:
                continue
            expected = outcome(lambda: call(op, sample))
            if not isinstance(expected, torch.Tensor) or expected.numel() < 2:
                continue
            shape, n = sample.input.shape, sample.input.numel()
            cases = []
            if op.supports_out:
                # The first input and out= in one buffer, out= one element further on.
                def out_case(on):
                    buffer = torch.zeros(n + expected.numel() + 1, dtype=expected.dtype, device=on)
                    buffer[:n].copy_(sample.input.reshape(-1))
                    inputs = (buffer[:n].view(shape).to(sample.input.dtype), *cpu_or(sample.args, on))
                    return op.op, inputs, {**cpu_or(sample.kwargs, on), "out": buffer[1:1 + expected.numel()].view(expected.shape)}
                cases.append(out_case)
            same_shape = [k for k, a in enumerate(sample.args)
                          if isinstance(a, torch.Tensor) and a.shape == shape and a.dtype == sample.input.dtype]
            if op.inplace_variant is not None and same_shape and expected.dtype == sample.input.dtype:
                # self and another operand of its shape over one buffer, one element apart.
                def inplace_case(on):
                    buffer = torch.zeros(n + 1, dtype=sample.input.dtype, device=on)
                    buffer[1:].copy_(sample.input.reshape(-1))
                    args = list(cpu_or(sample.args, on))
                    args[same_shape[0]] = buffer[:n].view(shape)
                    return op.inplace_variant, (buffer[1:].view(shape), *args), cpu_or(sample.kwargs, on)
                cases.append(inplace_case)
            for case in cases:
                fn, args, kwargs = case(device)
                on_device = outcome(lambda: fn(*args, **kwargs))
                fn, args, kwargs = case("cpu")
                on_cpu = outcome(lambda: fn(*args, **kwargs))
                self.assertEqual(isinstance(on_device, Exception), isinstance(on_cpu, Exception),
                                 msg=f"CPU: {on_cpu!r}\nopenreg: {on_device!r}")
                if isinstance(on_cpu, Exception):
                    self.assertEqual(type(on_device), type(on_cpu), msg=f"CPU: {on_cpu!r}\nopenreg: {on_device!r}")
                tried += 1

    # ANCHOR_END: overlap

    # ANCHOR: mixed
    @ops(op_db, dtypes=OpDTypes.any_one)
    def test_mixed_devices(self, device, dtype, op):
        """A non-empty operand on the CPU (other than a 0-dim scalar) or on the other openreg
        device, next to one on this device, is an error, as on CUDA; an out= on the CPU too."""
        allowed = MIXED_DEVICES_ALLOWED.get(op.full_name, ((), ""))[0]
        for sample in itertools.islice(op.sample_inputs(device, dtype), 2):
            flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
            if any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in flat):
                continue  # composites return early on empty tensors, before any device check (CUDA's too)
            operands = [k for k, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.dim() > 0]
            for k, where in itertools.product(operands, ("cpu", f"{DEVICE}:1")):
                stays = [j for j in operands if j != k and flat[j].device == torch.device(device)]
                if k in allowed or flat[k].device != torch.device(device) or not stays:
                    continue
                moved = list(flat)
                moved[k] = flat[k].detach().to(where).requires_grad_(flat[k].requires_grad)
                inp, args, kwargs = tree_unflatten(moved, spec)
                # RuntimeError with CUDA's message, or indexing's IndexError naming the devices.
                with self.assertRaisesRegex((RuntimeError, IndexError), "(?i)device", msg=f"operand {k} on {where}"):
                    op(inp, *args, **kwargs)
            if op.supports_out:
                expected = outcome(lambda: call(op, sample))
                if isinstance(expected, torch.Tensor) and expected.numel() > 0:
                    with self.assertRaisesRegex(RuntimeError, "(?i)device", msg="out= on the CPU"):
                        call(op, sample, out=torch.empty_like(expected, device="cpu"))

    # ANCHOR_END: mixed

    # ANCHOR: fake
    @ops(op_db, dtypes=OpDTypes.none)
    def test_fake_tensors_match_the_device(self, device, op):
        """torch.compile traces with fake tensors: every operator a sample reaches, forward
        and backward, must give the sizes, strides, storage offset and aliasing on the device
        that its fake (meta) implementation promises. CrossRefFakeMode runs each one both
        ways and compares, on a spread of samples and a non-contiguous copy of the first
        (models' transposed projections are where strides go wrong)."""
        for dtype in (torch.float32, torch.float16, torch.int64)[:3 if reaches_native_kernel(op) else 1]:
            if dtype in op.supported_dtypes("cpu") or dtype in op.supported_dtypes("cuda"):
                with self.subTest(dtype=dtype):
                    self.fake_tensors_match(device, dtype, op)

    def fake_tensors_match(self, device, dtype, op):
        grad = op.supports_autograd and dtype in op.supported_backward_dtypes(DEVICE)
        samples = spread(list(op.sample_inputs(device, dtype, requires_grad=grad)), FAKE_SPREAD)
        for sample in samples + [s.noncontiguous() for s in samples[:1]]:
            with CrossRefFakeMode(ignore_op_fn=lambda fn: fn in FAKE_IGNORED):
                result = outcome(lambda: call(op, sample))
                if isinstance(result, AssertionError):
                    raise result
                outputs = [t for t in tensors(result) if t.requires_grad] if grad else []
                leaves = [t for t in tensors((sample.input, sample.args)) if t.requires_grad]
                if outputs and leaves:
                    backward = outcome(lambda: torch.autograd.grad(outputs, leaves, [torch.ones_like(t) for t in outputs],
                                                                  allow_unused=True))
                    if isinstance(backward, AssertionError):
                        raise backward

    # ANCHOR_END: fake

    # ANCHOR: test_cuda_dtypes
    @ops([op for op in op_db if cuda_only_dtypes(op)], dtypes=OpDTypes.none)
    def test_cuda_dtypes(self, device, op):
        """The dtypes CUDA supports and CPU does not: computed (and compared with CPU's result
        in a wider dtype), or refused with an error naming openreg and the dtype."""
        for dtype in cuda_only_dtypes(op):
            computes = CUDA_DTYPES_COMPUTED.get((op.full_name, dtype))  # the reference's dtype
            samples = outcome(lambda: list(itertools.islice(op.sample_inputs(device, dtype), 4)))
            if isinstance(samples, Exception):
                # The samples themselves need the dtype on the device (factories, fills).
                self.assertIsNone(computes, msg=f"{dtype}: {samples!r}")
                self.assertIsInstance(samples, (RuntimeError, TypeError))
                continue
            for sample in samples:
                result = outcome(lambda: call(op, sample))
                if op.full_name in RANDOM and not isinstance(result, Exception):
                    self.assertEqual(tensors(result)[0].dtype, dtype)  # random: no values to compare
                    continue
                if computes is None or (op.full_name in RANDOM and isinstance(result, Exception)):
                    self.assertTrue(is_clear_dtype_error(result, dtype), msg=f"{dtype}: {result!r}")
                    continue
                self.assertNotIsInstance(result, Exception, msg=f"{dtype}")
                # CPU's result in a dtype it supports, converted back: the reference.
                wide = cpu_twin((sample.input, sample.args, sample.kwargs))
                wide = tree_map(lambda t: t.to(computes) if isinstance(t, torch.Tensor) and t.dtype == dtype else t, wide)
                expected = op(wide[0], *wide[1], **wide[2])
                # The reference rounded to the result's dtype; 16-bit results within a few ulps of
                # the largest value (a sum rounds in its own order).
                got = cpu_twin(result)
                expected = tree_map(lambda e, g: e.to(g.dtype) if isinstance(e, torch.Tensor) else e, expected, got)
                half = dtype in (torch.float16, torch.bfloat16, torch.complex32)
                scale = max((float(t.abs().max()) for t in tensors(expected)
                             if t.numel() and (t.is_floating_point() or t.is_complex())), default=1.0)
                self.assertEqual(got, expected, exact_dtype=False, equal_nan=True,
                                 **({"atol": 1e-2 * max(scale, 1.0), "rtol": 1e-2} if half else {}))


    # ANCHOR_END: test_cuda_dtypes


instantiate_device_type_tests(TestConformance, globals(), only_for=DEVICE)


# ANCHOR: lists
def test_random_entries_draw_other_numbers_than_cpu():
    """Each RANDOM exclusion is needed: on one of its samples the device's draws differ
    from CPU's (OpInfo seeds random entries itself, so each side is deterministic)."""
    for name in sorted(RANDOM):
        op = next(o for o in op_db if o.full_name == name)
        dtype = torch.float32 if torch.float32 in op.supported_dtypes("cpu") else next(iter(op.supported_dtypes("cpu")))
        differs = False
        for sample in itertools.islice(op.sample_inputs(DEVICE, dtype), 40):
            on_cpu, on_device = outcome(lambda: call_on_cpu(op, sample)), outcome(lambda: call(op, sample))
            if isinstance(on_cpu, Exception) or isinstance(on_device, Exception):
                continue
            pairs = zip(tensors(cpu_twin(on_device)), tensors(on_cpu))
            differs = differs or any(d.shape == c.shape and not bool(((d == c) | (d != d) & (c != c)).all())
                                     for d, c in pairs)
        assert differs, f"{name}: the device draws CPU's numbers; it need not be excluded"


def test_sparse_layouts_are_refused():
    """The entries SPARSE excludes raise the dispatcher's NotImplementedError, naming openreg."""
    x = torch.eye(3, device=DEVICE)
    try:
        x.to_sparse()
    except NotImplementedError as e:
        assert "openreg" in str(e)
    else:
        raise AssertionError("to_sparse() made a sparse openreg tensor")
# ANCHOR_END: lists
