"""The registration paths for operators: global fallback, per-operator fallback, blocklist,
and a DispatchStub kernel (abs) whose body is Rust."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch


@pytest.mark.parametrize("shape", [(0,), (), (5,), (3, 4), (1 << 18,)])
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_abs_through_the_stub_matches_cpu(shape, device):
    x = torch.randn(shape)
    d = x.to(device)
    assert torch.equal(torch.abs(d).cpu(), x.abs())
    out = torch.empty_like(d)
    torch.abs(d, out=out)
    assert torch.equal(out.cpu(), x.abs())
    d.abs_()
    assert torch.equal(d.cpu(), x.abs())


def test_abs_kernel_is_queued_on_the_current_stream():
    x = torch.randn(1 << 20, device="openreg")
    s = torch.Stream(device="openreg")
    with s:
        torch.openreg._sleep(100)
        y = x.abs()
        assert not s.query()
        assert torch.equal(y.cpu(), x.cpu().abs())


def test_abs_of_other_dtypes_and_layouts_is_correct_and_says_so():
    code = textwrap.dedent("""
        import warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = torch.tensor([-3.0, 4.0], dtype=torch.float64, device="openreg").abs().cpu().tolist()
            b = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], device="openreg").t().abs().cpu().tolist()
        counts = torch.openreg.fallback_counts()
        print(a, b, counts.get("aten::abs (Double)"), "aten::abs (Float)" in counts,
              any("aten::abs (Double) has no openreg kernel" in str(w.message) for w in caught))
    """)
    env = {**os.environ, "OPENREG_WARN_FALLBACK": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[3.0, 4.0] [[1.0, 3.0], [2.0, 4.0]] 1 False True", out.stderr


def test_abs_backward():
    x = torch.tensor([-2.0, 3.0], device="openreg", requires_grad=True)
    x.abs().sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0]


def test_per_operator_fallback_is_the_kernel_of_atan2():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::atan2", "PrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::hypot", "PrivateUse1")
    x, y = torch.randn(4), torch.randn(4)
    torch.openreg.reset_fallback_counts()
    got = torch.atan2(x.openreg(), y.openreg()).cpu()
    assert torch.equal(got, torch.atan2(x, y))
    assert torch.openreg.fallback_counts() == {"aten::atan2": 1}
    with pytest.raises(RuntimeError, match="found at least two devices, openreg:0 and openreg:1"):
        torch.atan2(x.openreg(0), y.openreg(1))


def test_blocklisted_operators_raise_instead_of_falling_back():
    code = "import torch; x = torch.ones(2, device='openreg'); print((x + x).cpu().tolist()); torch.hypot(x, x)"
    env = {**os.environ, "OPENREG_FALLBACK_BLOCKLIST": "aten::hypot.out"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[2.0, 2.0]"
    assert ("NotImplementedError: Operator 'aten::hypot.out' is not implemented for device openreg "
            "and may not fall back to the CPU") in out.stderr


# ---- scaled dot-product attention through the "overrideable" backend ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "float"), (False, "bool")])
def test_sdpa_overrideable_forward_and_backward_match_cpu(causal, mask, dtype):
    import torch.nn.functional as F
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8).to(dtype) for _ in range(3))
    m = {None: None, "float": torch.randn(5, 5).to(dtype), "bool": torch.rand(5, 5) > 0.3}[mask]
    if m is not None and m.dtype == torch.bool:
        m[:, 0] = True  # no fully masked rows
    assert torch._fused_sdp_choice(q.openreg(), k.openreg(), v.openreg()) == 4  # OVERRIDEABLE
    cpu = [t.float().clone().requires_grad_() for t in (q, k, v)]
    dev = [t.openreg().requires_grad_() for t in (q, k, v)]
    mask_cpu = m.float() if m is not None and m.dtype != torch.bool else m
    expected = F.scaled_dot_product_attention(*cpu, attn_mask=mask_cpu, is_causal=causal)
    got = F.scaled_dot_product_attention(*dev, attn_mask=None if m is None else m.openreg(),
                                         is_causal=causal)
    assert type(got.grad_fn).__name__ == "ScaledDotProductFusedAttentionOverrideableBackward0"
    assert got.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(got.cpu().float(), expected, **tol)
    grad = torch.randn(expected.shape)
    expected.backward(grad)
    got.backward(grad.to(dtype).openreg())
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu().float(), c.grad, **tol)


def test_sdpa_falls_back_to_math_where_the_kernel_does_not_apply():
    import torch.nn.functional as F
    q = torch.randn(1, 2, 4, 8).openreg()
    assert torch._fused_sdp_choice(q, q, q, dropout_p=0.5) == 4  # dropout is ours too
    assert torch._fused_sdp_choice(q, q, q, enable_gqa=True) == 4  # one group per head
    k = torch.randn(1, 3, 4, 8).openreg()
    assert torch._fused_sdp_choice(q, k, k, enable_gqa=True) == 0  # 2 heads over 3: MATH's error
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    assert torch._fused_sdp_choice(q, k[:, :1], k[:, :1]) == 0  # heads differ without enable_gqa
    assert torch._fused_sdp_choice(q.double(), q.double(), q.double()) == 0
    out = F.scaled_dot_product_attention(q.double(), q.double(), q.double())
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*[q.cpu().double()] * 3))


@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal,masked", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("query_len,key_len", [(1, 7), (5, 7), (17, 33), (33, 17), (900, 900)])  # the last: past the row kernel
@pytest.mark.parametrize("transposed", [False, True])
def test_sdpa_grouped_query_attention_matches_cpu(transposed, query_len, key_len, causal, masked, dtype, device):
    """Grouped-query attention (6 query heads over 2 key/value heads, as Llama's KV cache has
    them) in the fused kernel, forward and backward, against CPU's sdpa with enable_gqa; the
    inputs contiguous or as a model makes them ([B, L, H, D] projections, transposed)."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    layout = (lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)) if transposed else (lambda t: t)
    q = layout(torch.randn(2, 6, query_len, 8).to(dtype))
    k, v = (layout(torch.randn(2, 2, key_len, 8).to(dtype)) for _ in range(2))
    mask = torch.rand(query_len, key_len) > 0.3 if masked else None
    if mask is not None:
        mask[:, 0] = True  # no row masked entirely
    cpu = [t.float().clone().requires_grad_() for t in (q, k, v)]
    dev = [layout(t.detach().to(device)).requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*cpu, attn_mask=mask, is_causal=causal and query_len > 1, enable_gqa=True)
    got = F.scaled_dot_product_attention(*dev, attn_mask=None if mask is None else mask.to(device),
                                         is_causal=causal and query_len > 1, enable_gqa=True)
    assert type(got.grad_fn).__name__ == "ScaledDotProductFusedAttentionOverrideableBackward0"
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(got.detach().cpu().float(), want.detach(), **tol)
    grad = torch.randn(want.shape)
    want.backward(grad)
    got.backward(grad.to(dtype).to(device))
    for d, c in zip(dev, cpu):
        assert d.grad.shape == c.grad.shape
        torch.testing.assert_close(d.grad.cpu().float(), c.grad, **tol)


@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_sdpa_dropout_on_the_device_matches_its_own_mask(device):
    """Dropout inside the overrideable attention: the mask is drawn from a seed and drawn again
    in the backward. Forward and gradients against CPU autograd over the same mask (the debug
    output holds the dropped probabilities), reproducible from the device's seed."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    dev = [t.to(device).requires_grad_() for t in (q, k, v)]
    torch.openreg.manual_seed_all(3)
    debug = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *dev, None, 0.3, False, True)[-1].detach().cpu()
    mask = debug != 0
    assert 0.5 < mask.float().mean().item() < 0.9
    torch.openreg.manual_seed_all(3)  # the same seed: the same mask
    torch.openreg.reset_fallback_counts()
    got = F.scaled_dot_product_attention(*dev, dropout_p=0.3)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    probs = torch.softmax(cpu[0] @ cpu[1].transpose(-2, -1) / 8 ** 0.5, -1)
    expected = (probs * mask / 0.7) @ cpu[2]
    torch.testing.assert_close(got.detach().cpu(), expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn(expected.shape)
    expected.backward(grad)
    got.backward(grad.to(device))
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)
    torch.openreg.synchronize()
    assert torch.openreg.fallback_counts() == {}
    again = F.scaled_dot_product_attention(*dev, dropout_p=0.3)
    assert not torch.allclose(again.detach().cpu(), got.detach().cpu())  # a new mask per call


# ---- quantize_per_tensor ----

@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8, torch.qint32])
def test_quantize_per_tensor_matches_cpu(dtype):
    x = torch.randn(3, 5) * 4
    expected = torch.quantize_per_tensor(x, 0.05, 7, dtype)
    got = torch.quantize_per_tensor(x.openreg(), 0.05, 7, dtype)
    assert got.is_quantized and got.device.type == "openreg" and got.dtype == dtype
    assert (got.q_scale(), got.q_zero_point(), got.qscheme()) == (0.05, 7, torch.per_tensor_affine)
    assert torch.equal(got.dequantize().cpu(), expected.dequantize())
    got_t = torch.quantize_per_tensor(x.t().openreg(), 0.05, 7, dtype)  # non-contiguous input
    assert torch.equal(got_t.dequantize().cpu(), torch.quantize_per_tensor(x.t(), 0.05, 7, dtype).dequantize())
