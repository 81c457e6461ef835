"""Libraries take other branches off the CPU. transformers' mixture-of-experts code counts
tokens per expert with `torch.histc` on int32 when the device is not the CPU or MPS (CPU has no
integer histc) and switches its experts to batched matrix products for decoding; a device that
only covers what CPU covers fails there. A Mixtral model from small config trains on openreg,
through those branches, as on CPU, with nothing on the CPU fallback."""

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def mixtral():
    config = transformers.MixtralConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        output_router_logits=True, router_aux_loss_coef=0.1, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.MixtralForCausalLM(config)


class HistcDtypes:
    """Records the dtypes torch.histc is called with (the library's branch taken)."""

    def __enter__(self):
        self.seen, self.histc = [], torch.histc

        def spy(input, *args, **kwargs):
            self.seen.append((input.device.type, input.dtype))
            return self.histc(input, *args, **kwargs)

        torch.histc = spy
        return self

    def __exit__(self, *exc):
        torch.histc = self.histc


def train_step(model, ids, device):
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(ids.to(device), labels=ids.to(device))
    out.loss.backward()
    optimizer.step()
    return out.loss.detach().cpu(), out.aux_loss.detach().cpu(), {n: p.detach().cpu() for n, p in model.named_parameters()}


def test_mixture_of_experts_trains_as_on_cpu_through_the_integer_histc_branch():
    model = mixtral()
    twin = copy.deepcopy(model)
    ids = torch.randint(2, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    with HistcDtypes() as cpu_calls:
        cpu_loss, cpu_aux, cpu_params = train_step(model, ids, "cpu")
    torch.openreg.reset_fallback_counts()
    with HistcDtypes() as calls:
        loss, aux, params = train_step(twin, ids, "openreg")
    assert torch.openreg.fallback_counts() == {}
    # The branches: float32 counts on the CPU, int32 counts on the device.
    assert set(cpu_calls.seen) == {("cpu", torch.float32)}
    assert set(calls.seen) == {("openreg", torch.int32)}
    torch.testing.assert_close(loss, cpu_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(aux, cpu_aux, rtol=1e-5, atol=1e-6)
    for name in params:
        torch.testing.assert_close(params[name], cpu_params[name], rtol=1e-4, atol=1e-5, msg=name)


def test_mixture_of_experts_generates_cpus_tokens_with_batched_experts():
    model = mixtral().eval()
    prompt = torch.randint(2, 128, (2, 5), generator=torch.Generator().manual_seed(2))
    settings = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, attention_mask=torch.ones_like(prompt))
    expected = model.generate(prompt, **settings)
    model.to("openreg")
    switches, set_implementation = [], model.set_experts_implementation
    model.set_experts_implementation = lambda value: (switches.append(value), set_implementation(value))[1]
    torch.openreg.reset_fallback_counts()
    got = model.generate(prompt.to("openreg"), **{**settings, "attention_mask": settings["attention_mask"].to("openreg")})
    assert torch.openreg.fallback_counts() == {}
    assert torch.equal(got.cpu(), expected)
    # Decoding off the CPU switched the experts to batched products, and back afterwards.
    assert any("batched_mm" in str(value) for value in switches), switches
    assert model.get_experts_implementation() == mixtral().get_experts_implementation()
