"""Real models from real libraries (timm, transformers), built from small configs with random
weights (nothing is downloaded): one training step matches CPU, greedy generation with the KV
cache produces CPU's tokens, tied weights stay tied, and the operators that reach the CPU
fallback are the ones named here."""

import copy
import warnings

import pytest
import torch

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


# ANCHOR: zoo
def vision(name, **config):
    return lambda: timm.create_model(name, pretrained=False, num_classes=10, **config)


VISION = {
    "mobilenetv3_small_050": vision("mobilenetv3_small_050"),  # depthwise, inverted residuals, hardswish
    "convnext_atto": vision("convnext_atto"),                  # depthwise 7x7, LayerNorm over channels
    "vit_tiny": vision("vit_tiny_patch16_224", img_size=64, patch_size=16),  # attention, GELU
    "resnet10t": vision("resnet10t"),                          # batch norm, max pooling
}

T = transformers
LANGUAGE = {
    # Tied input and output embeddings, learned positions, GELU.
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=1,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    # Rotary embeddings, RMSNorm, SiLU gates, grouped-query attention (4 heads, 2 key/value heads).
    "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, bos_token_id=0, eos_token_id=1)),
    # Encoder-decoder with relative position buckets.
    "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
        d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=128,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0)),
    # Bidirectional encoder, token-type embeddings, a masked-LM head.
    "bert": lambda: T.BertForMaskedLM(T.BertConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
}
# ANCHOR_END: zoo



def batch_for(name):
    g = torch.Generator().manual_seed(1)
    if name in VISION:
        return {"pixels": torch.randn(4, 3, 64, 64, generator=g), "labels": torch.tensor([1, 3, 5, 7])}
    ids = torch.randint(2, 128, (2, 12), generator=g)
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(2, 128, (2, 6), generator=g)}
    return {"input_ids": ids, "labels": ids}


def train_step(model, batch, device):
    """One SGD step (Adam would turn tiny gradient differences near zero into full steps)."""
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = {k: v.to(device) for k, v in batch.items()}
    if "pixels" in batch:
        loss = torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["labels"])
    else:
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return loss.detach().cpu(), {n: p.detach().cpu() for n, p in model.named_parameters()}


# ANCHOR: step
@pytest.mark.parametrize("name", [*VISION, *LANGUAGE])
def test_a_training_step_matches_cpu(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = {**VISION, **LANGUAGE}[name]()
    twin = copy.deepcopy(model)
    batch = batch_for(name)
    cpu_loss, cpu_params = train_step(model, batch, "cpu")
    torch.openreg.reset_fallback_counts()
    loss, params = train_step(twin, batch, "openreg")
    reached = set(torch.openreg.fallback_counts())

    torch.testing.assert_close(loss, cpu_loss, rtol=1e-4, atol=1e-5)
    assert params.keys() == cpu_params.keys()
    for key in params:
        torch.testing.assert_close(params[key], cpu_params[key], rtol=1e-3, atol=1e-4, msg=key)
    assert reached == set(), f"operators on the CPU fallback: {sorted(reached)}"
# ANCHOR_END: step


def test_tied_embeddings_stay_tied_and_train_as_one():
    torch.manual_seed(0)
    model = LANGUAGE["gpt2"]().to("openreg")
    assert model.lm_head.weight is model.transformer.wte.weight
    loss, params = train_step(model, batch_for("gpt2"), "openreg")
    assert model.lm_head.weight is model.transformer.wte.weight
    assert "lm_head.weight" not in params  # one parameter, listed once


# ANCHOR: generate
@pytest.mark.parametrize("name", ["gpt2", "llama", "t5"])
def test_greedy_generation_with_the_kv_cache_matches_cpu(name):
    torch.manual_seed(0)
    model = LANGUAGE[name]().eval()
    prompt = torch.randint(2, 128, (2, 6), generator=torch.Generator().manual_seed(2))
    settings = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True)
    expected = model.generate(prompt, **settings)
    model.to("openreg")
    torch.openreg.reset_fallback_counts()
    got = model.generate(prompt.to("openreg"), **settings)
    reached = set(torch.openreg.fallback_counts())
    assert got.device.type == "openreg"
    assert torch.equal(got.cpu(), expected)
    assert reached == set(), f"operators on the CPU fallback: {sorted(reached)}"
# ANCHOR_END: generate
