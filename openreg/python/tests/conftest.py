import random
import sys
import unittest

import numpy
import pytest
import torch
from torch.testing._internal import common_utils


@pytest.fixture(autouse=True)
def _device_zero():
    """Each test starts and ends on openreg:0."""
    torch.openreg.set_device(0)
    yield
    torch.openreg.set_device(0)


# ANCHOR: harness
# Two helpers of PyTorch's test harness cost more than the operators do, on every sample:
# the sample iterator (common_utils.TrackedInputIter) looks up the running test with
# inspect.stack(), which reads the source of every frame (30 ms), and seeds each sample with
# torch.manual_seed, which also queues a seed for CUDA, XPU and MTIA with a formatted
# traceback each (3 ms). The same work, done directly:
def current_test_function():
    """common_utils.extract_test_fn: the test method on the stack, found without sources."""
    frame = sys._getframe(1)
    while frame is not None:
        test = frame.f_locals.get("self")
        if isinstance(test, unittest.TestCase):
            *_, cls_name, test_name = test.id().rsplit(".", 2)
            if cls_name == type(test).__name__ and test_name.startswith("test"):
                return getattr(test, test_name).__func__
        frame = frame.f_back
    return None


def seed_generators(seed=None):
    """common_utils.set_rng_seed for the generators a sample can draw from here."""
    seed = common_utils.SEED if seed is None else seed
    torch.default_generator.manual_seed(seed)
    torch.openreg.manual_seed_all(seed)
    random.seed(seed)
    numpy.random.seed(seed)


common_utils.extract_test_fn = current_test_function
common_utils.set_rng_seed = seed_generators
# ANCHOR_END: harness
