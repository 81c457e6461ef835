"""torch.compile on openreg, Dynamo's side: the device interface, the `openreg` backend (and
aot_eager), graphs and graph breaks, guards on the device, dynamic shapes, training, autocast,
the default device, and errors that match eager."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_interface_is_registered_when_dynamo_loads_not_before():
    code = textwrap.dedent("""
        import sys, torch
        assert "torch._dynamo" not in sys.modules, "import torch must not load Dynamo"
        from torch._dynamo.device_interface import get_interface_for_device
        I = get_interface_for_device("openreg")
        with I.device(1):
            assert I.current_device() == 1
        assert I.device_count() == 2 and I.is_available()
        assert I.get_raw_stream(0) == torch.accelerator.current_stream(0).native_handle
        assert isinstance(I.Stream(), torch.Stream) and I.exposes_streams()
        assert I.get_device_properties(0).total_memory > 0
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "ok", run.stderr


def fused(x, w, b):
    return torch.sigmoid(x * w + b).sum(-1)


@pytest.mark.parametrize("backend", ["openreg", "aot_eager", "eager"])
def test_backends_match_eager_and_cpu(backend):
    x, w, b = (torch.randn(4, 8, device="openreg") for _ in range(3))
    got = torch.compile(fused, backend=backend, fullgraph=True)(x, w, b)
    assert got.device == torch.device("openreg:0")
    torch.testing.assert_close(got.cpu(), fused(x.cpu(), w.cpu(), b.cpu()))


def test_the_openreg_backend_decomposes_what_the_device_lacks():
    def f(x, w, b):
        return torch.logit(torch.sigmoid(x * w + b), eps=1e-6).sum(-1)

    x, b = (torch.randn(4, 8, device="openreg") for _ in range(2))
    w = torch.randn(4, 8, device="openreg", requires_grad=True)
    compiled = torch.compile(f, backend="openreg")
    compiled(x, w, b).sum().backward()
    torch.openreg.reset_fallback_counts()
    w.grad = None
    f(x, w, b).sum().backward()
    expected = w.grad.clone()
    # eager: logit and its backward have no openreg kernel and run on the CPU
    assert {"aten::logit", "aten::logit_backward.grad_input"} <= set(torch.openreg.fallback_counts())
    torch.openreg.reset_fallback_counts()
    w.grad = None
    compiled(x, w, b).sum().backward()
    # compiled: decomposed into clamps, logarithms and divisions, all on the device
    assert torch.openreg.fallback_counts() == {}
    torch.testing.assert_close(w.grad.cpu(), expected.cpu())


# ANCHOR: guards
def test_guards_recompile_on_a_device_change_not_on_a_new_tensor():
    counter = CompileCounter()
    f = torch.compile(lambda x: x * 2 + 1, backend=counter)
    f(torch.ones(3, device="openreg:0"))
    f(torch.zeros(3, device="openreg:0"))  # same shape and device: no recompile
    assert counter.frame_count == 1
    out = f(torch.ones(3, device="openreg:1"))
    assert counter.frame_count == 2 and out.device == torch.device("openreg:1")
    f(torch.ones(3))  # the CPU is another device too
    assert counter.frame_count == 3
# ANCHOR_END: guards


def test_graph_breaks_are_counted_where_expected():
    def f(x):
        y = x.sin() + 1
        print("a graph break")  # noqa: T201  (Python side effect: Dynamo breaks the graph)
        return y.relu() * 2

    x = torch.randn(5, device="openreg")
    explanation = torch._dynamo.explain(f)(x)
    assert explanation.graph_break_count == 1 and explanation.graph_count == 2
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(f, backend="openreg", fullgraph=True)(x)


def test_dynamic_shapes_one_graph_for_many_sizes():
    counter = CompileCounter()
    f = torch.compile(lambda x: (x * x).sum(0), backend=counter, dynamic=True)
    for n in [3, 5, 9, 17]:
        x = torch.randn(n, 4, device="openreg")
        torch.testing.assert_close(f(x).cpu(), (x.cpu() * x.cpu()).sum(0))
    assert counter.frame_count == 1


def test_training_a_compiled_module_matches_eager():
    def run(compile_it):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("openreg")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        step_model = torch.compile(model, backend="openreg", fullgraph=True) if compile_it else model
        x, target = torch.randn(8, 16, device="openreg"), torch.randn(8, 4, device="openreg")
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = ((step_model(x) - target) ** 2).mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    (eager_losses, eager_params), (compiled_losses, compiled_params) = run(False), run(True)
    torch.testing.assert_close(compiled_losses, eager_losses)
    for a, b in zip(compiled_params, eager_params):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", ["openreg", "inductor"])
def test_autocast_and_the_default_device_inside_compiled_code(backend):
    @torch.compile(backend=backend, fullgraph=True)
    def f(a, b):
        with torch.autocast("openreg", dtype=torch.bfloat16):
            product = a @ b
        return product, torch.ones(2)  # the default device decides where this lives

    a, b = torch.randn(4, 4, device="openreg"), torch.randn(4, 4, device="openreg")
    product, _ = f(a, b)
    assert product.dtype == torch.bfloat16 and product.device.type == "openreg"
    torch.testing.assert_close(product.float().cpu(), a.cpu() @ b.cpu(), rtol=2e-2, atol=2e-2)
    torch.set_default_device("openreg")
    try:
        torch._dynamo.reset()
        _, ones = f(a, b)
        assert ones.device == torch.device("openreg:0")
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("other", ["openreg:1", "cpu"])
def test_mixed_devices_raise_the_eager_error(other):
    x, y = torch.ones(3, device="openreg:0"), torch.ones(3, device=other)
    with pytest.raises(RuntimeError) as eager:
        torch.add(x, y)
    with pytest.raises(RuntimeError) as compiled:
        torch.compile(torch.add, backend="openreg")(x, y)
    assert "Expected all tensors to be on the same device" in str(eager.value)
    assert "Expected all tensors to be on the same device" in str(compiled.value)


# --- Inductor: the default backend generates C++ kernels that run on the device ---

from torch._inductor.utils import run_and_get_code  # noqa: E402


def gelu_chain(x, w, b):
    return torch.nn.functional.gelu(x * w + b).sum(-1)


# ANCHOR: inductor
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_inductor_fuses_a_pointwise_chain_into_one_device_kernel(device):
    x, w, b = (torch.randn(*s, device=device) for s in [(64, 128), (128,), (128,)])
    out, (code, *_) = run_and_get_code(torch.compile(gelu_chain), x, w, b)
    assert out.device == torch.device(device)
    torch.testing.assert_close(out.cpu(), gelu_chain(x.cpu(), w.cpu(), b.cpu()), rtol=1e-4, atol=1e-4)
    assert code.count("CompiledKernel(") == 1, "one fused kernel"
    assert "cpp_fused_add_gelu_mul_sum_0(" in code and "device='openreg'" in code
# ANCHOR_END: inductor


def test_kernels_compile_against_the_header_the_cpu_kernels_precompile():
    """kernel_library() overrides a hook of Inductor's CppCodeCache: a torch that renames it, or
    changes what load_async takes, fails here instead of quietly compiling without the header."""
    import inspect

    from torch._inductor import codecache
    from torch_openreg.openreg._inductor import kernel_library

    hook = inspect.getattr_static(codecache.CppCodeCache, "_get_uncompiled_header").__func__
    assert str(inspect.signature(hook)) == "(cls, device: 'str') -> 'str | None'"
    assert "submit_fn" in inspect.signature(codecache.CppCodeCache.load_async).parameters
    header = kernel_library()._get_uncompiled_header("openreg")
    assert header == codecache._get_cpp_prefix_header("cpu"), "the header the CPU's kernels precompile"
    x = torch.randn(8)
    torch.testing.assert_close(torch.compile(lambda x: (x * 3).cos())(x.openreg()).cpu(), (x * 3).cos())
    precompiled = [h for h in Path(codecache._HEADER_DIR).glob("*.h")
                   if header in h.read_text() and h.with_suffix(".h.gch").exists()]
    assert precompiled, f"no precompiled {header} in {codecache._HEADER_DIR}"


def test_kernels_compile_without_inductors_workers():
    """With one compile thread Inductor has no workers: a kernel compiles where it is defined.
    Its constant is new, so that it does compile; the rest of the suite's cache is reused."""
    constant = 1 + time.time_ns() % 1_000_000_007 / 1e9
    code = textwrap.dedent(f"""
        import torch
        x = torch.randn(8)
        out = torch.compile(lambda x: (x * {constant!r}).sin())(x.to("openreg"))
        print(torch.allclose(out.cpu(), (x * {constant!r}).sin(), atol=1e-5))
    """)
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.stdout.split() == ["True"], run.stdout + run.stderr[-3000:]


def test_inductor_calls_native_kernels_for_matrix_products_and_trains_like_eager():
    def run(compile_it):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("openreg")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        forward = torch.compile(model) if compile_it else model
        x, target = torch.randn(16, 32, device="openreg"), torch.randn(16, 8, device="openreg")
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = ((forward(x) - target) ** 2).mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    (eager_losses, eager_params), (losses, params) = run(False), run(True)
    torch.testing.assert_close(losses, eager_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    x = torch.randn(4, 32, device="openreg")
    _, (code, *_) = run_and_get_code(torch.compile(torch.nn.Linear(32, 8).to("openreg")), x)
    assert "extern_kernels.addmm(" in code  # the matrix product is our native kernel


def test_a_compiled_decoder_training_step_with_grouped_query_attention_matches_eager():
    """A Llama-style decoder (grouped-query attention through the fused kernel, whose inputs are
    transposed projections) trained for two steps, compiled with Inductor and eagerly: the
    fake tensors Inductor plans with must match the kernels' outputs, strides included, or the
    compiled step fails its size and stride assertions."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="sdpa")
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(0)).to("openreg")

    def run(compile_it):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to("openreg")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            loss = model(ids, labels=ids).loss
            loss.backward()
            return loss

        step = torch.compile(step) if compile_it else step
        losses = []
        for _ in range(2):
            optimizer.zero_grad()
            losses.append(step().item())
            optimizer.step()
        return losses, [p.detach().cpu() for p in model.parameters()]

    (eager_losses, eager_params), (losses, params) = run(False), run(True)
    torch.testing.assert_close(losses, eager_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("shapes", [((4, 1), (1, 8)), ((3, 7), (7,)), ((5, 1, 3), (1, 4, 1))], ids=str)
def test_inductor_low_precision_and_broadcasts_match_cpu(shapes, dtype):
    # Inductor must treat our kernels as C++ ("cpp"), not as Triton: with the Triton name, a
    # float16 broadcast failed to compile ("expected scalar_var.dtype is not None").
    def f(x, y):
        return (x * y + x.abs()).softmax(-1).sum(0)

    x, y = (torch.randn(s).to(dtype) for s in shapes)
    got = torch.compile(f)(x.openreg(), y.openreg())
    torch.testing.assert_close(got.cpu(), torch.compile(f)(x, y), rtol=2e-2, atol=2e-2)


# ANCHOR: exceptions
FAILING = {
    # name: (function, arguments, the exception eager code raises on openreg and CPU)
    "index": (lambda x, i: x[i] * 2 + 1, lambda d: (torch.ones(3, device=d), torch.tensor([10], device=d)), IndexError),
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w) * 2,
                  lambda d: (torch.ones(4, 2, device=d), torch.tensor([7], device=d)), IndexError),
    "floor_divide": (lambda a, b: a // b + 1, lambda d: (torch.tensor([3], device=d), torch.tensor([0], device=d)),
                     RuntimeError),
}


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("name", FAILING)
def test_a_failing_compiled_kernel_raises_eagers_exception_and_the_device_lives_on(name, busy):
    f, arguments, eager_error = FAILING[name]
    args = arguments("openreg")
    with pytest.raises(eager_error):
        f(*args)
    compiled = torch.compile(f)
    with pytest.raises(eager_error, match="compiled kernel cpp_fused"):
        if busy:  # the stream still has work: the failure surfaces at the next synchronize
            big = torch.randn(512, 512, device="openreg")
            big @ big
        out = compiled(*args)
        torch.openreg.synchronize()
        out.cpu()
    # The process, the stream and compiled code still work.
    x = torch.arange(6.0, device="openreg")
    assert torch.compile(lambda x: x * 2 + 1)(x).cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    torch.openreg.synchronize()
# ANCHOR_END: exceptions


def test_inductor_dynamic_shapes():
    f = torch.compile(gelu_chain, dynamic=True)
    for n in [5, 9, 33]:
        x, w, b = torch.randn(n, 16, device="openreg"), torch.randn(16, device="openreg"), torch.randn(16, device="openreg")
        torch.testing.assert_close(f(x, w, b).cpu(), gelu_chain(x.cpu(), w.cpu(), b.cpu()), rtol=1e-4, atol=1e-4)


def test_a_second_process_reuses_the_compile_cache():
    # A graph no earlier run compiled (its constant is new), in the suite's own cache: the
    # first process misses and compiles it, the second finds it. Everything else in the cache
    # (Inductor's precompiled headers) is reused as any user's would be.
    constant = time.time_ns() % 1_000_000_007
    code = textwrap.dedent(f"""
        import torch
        from torch._dynamo.utils import counters
        x = torch.randn(8, 8, device="openreg")
        torch.compile(lambda x: torch.nn.functional.gelu(x * 2 + {constant}).sum(-1))(x)
        print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"])
    """)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert runs[0].stdout.split() == ["0", "1"] and runs[1].stdout.split() == ["1", "0"]


# --- bad input: clear Python errors, never a crash or a hang ---

def test_an_operator_without_a_fake_kernel_is_named_in_the_error():
    lib = torch.library.Library("openreg_test_nometa", "DEF")
    lib.define("nometa(Tensor x) -> Tensor")
    lib.impl("nometa", lambda x: x + 1, "PrivateUse1")
    x = torch.ones(3, device="openreg")
    for backend in ["inductor", "openreg"]:
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported, match="openreg_test_nometa.nometa.default"):
            torch.compile(lambda t: torch.ops.openreg_test_nometa.nometa(t) * 2, backend=backend, fullgraph=True)(x)


def test_mixed_devices_under_inductor_are_a_runtime_error():
    x = torch.ones(3, device="openreg:1")
    for other in [torch.ones(3, device="openreg:0"), torch.ones(3)]:
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match="device"):
            torch.compile(lambda a, b: (a + b).sum())(x, other)


def test_a_failing_cpp_compiler_surfaces_with_its_message(tmp_path):
    compiler = tmp_path / "cxx"
    compiler.write_text('#!/bin/sh\ncase "$*" in *.cpp*) echo "cxx: error: simulated failure" >&2; exit 1;; esac\n'
                        'exec g++ "$@"\n')
    compiler.chmod(0o755)
    code = textwrap.dedent(f"""
        import torch, torch._inductor.config as config
        config.cpp.cxx = (None, {str(compiler)!r})
        try:
            torch.compile(lambda t: torch.nn.functional.gelu(t * 3).sum())(torch.randn(8, device="openreg"))
        except RuntimeError as e:
            print(type(e).__name__, "simulated failure" in str(e))
        print((torch.ones(2, device="openreg") + 1).cpu().tolist())
    """)
    env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert run.stdout.split("\n")[:2] == ["CppCompileError True", "[2.0, 2.0]"], run.stdout + run.stderr[-2000:]


# ANCHOR: patch_table
def _replaced():
    import torch_openreg.inductor_backend  # noqa: F401  (the C++ path registers its replacements)
    from torch_openreg.openreg import _inductor

    return _inductor.PATCHES


@pytest.mark.parametrize("patch", _replaced(), ids=lambda p: f"{p.module}.{p.qualname}")
def test_each_replaced_inductor_function_has_the_signature_it_was_checked_with(patch):
    import inspect

    owner, name = patch.owner_and_name()
    assert getattr(getattr(owner, name), "openreg_original", None) is patch.original(), "installed"
    assert str(inspect.signature(patch.original())) == patch.signature, (
        f"{patch.module}.{patch.qualname} changed since torch {patch.checked_with}; the replacement "
        f"may no longer do what it is for: {patch.why}")


def test_each_replaced_inductor_function_still_answers_what_the_replacement_changes():
    import types

    from torch.fx.experimental.proxy_tensor import make_fx

    originals = {f"{p.module}.{p.qualname}": p.original() for p in _replaced()}
    node = types.SimpleNamespace(get_device=lambda: torch.device("openreg", 0))
    assert originals["torch._inductor.scheduler.BaseSchedulerNode.is_cpu"](node) is False
    assert originals["torch._inductor.utils.get_current_backend"]("openreg") == "triton"
    assert originals["torch._inductor.codegen.common.get_current_backend"]("openreg") == "triton"
    header = originals["torch._inductor.codecache._get_cpp_wrapper_header"]("openreg", aot_mode=True)
    assert header == "torch/csrc/inductor/aoti_include/openreg.h"
    assert not os.path.exists(os.path.join(os.path.dirname(torch.__file__), "include", header)), "the wheel has none"
    x, w = torch.randn(8, 64, 32, 32, device="openreg"), torch.randn(64, 64, 3, 3, device="openreg")
    graph = make_fx(lambda x, w: torch.nn.functional.conv2d(x, w).relu(), tracing_mode="fake")(x, w)
    assert originals["torch._inductor.graph.GraphLowering.decide_layout_opt"](graph, is_inference=True) is True
    from torch._inductor.graph import GraphLowering

    assert GraphLowering.decide_layout_opt(graph, is_inference=True) is False, "replaced for openreg"
# ANCHOR_END: patch_table
