"""The second zoo: model families the first (test_zoo.py) lacks, from torchvision, timm and
transformers, built from small configs with random weights (nothing is downloaded). For each:
two SGD steps match CPU's, then inference (or greedy generation with the KV cache) matches
CPU's, and no operator reaches the CPU fallback."""

import copy
import warnings
from typing import Callable, NamedTuple

import pytest
import torch
import torch.nn.functional as F

timm = pytest.importorskip("timm")
torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from torchvision.models import detection, segmentation  # noqa: E402

T = transformers


class Family(NamedTuple):
    make: Callable[[], torch.nn.Module]
    batch: Callable[[torch.Generator], dict]
    loss: Callable[[torch.nn.Module, dict], torch.Tensor]
    # Inference on the trained model: its outputs, to compare with CPU's ("generate": greedy
    # generation from the batch's first prompt).
    infer: Callable[[torch.nn.Module, dict], object] | str | None = None


def lm_loss(model, b):
    return model(**b).loss


def tokens(g, n=2, length=12, vocab=128):
    ids = torch.randint(2, vocab, (n, length), generator=g)
    return {"input_ids": ids, "labels": ids}


def images(g, n=2, size=64, classes=10):
    return {"pixels": torch.randn(n, 3, size, size, generator=g), "labels": torch.randint(0, classes, (n,), generator=g)}


def classify(model, b):
    return F.cross_entropy(model(b["pixels"]), b["labels"])


def logits(model, b):
    return model(b["pixels"])


# ---- detection and segmentation (torchvision) ----

def faster_rcnn():
    backbone = detection.backbone_utils.resnet_fpn_backbone(backbone_name="resnet18", weights=None,
                                                            trainable_layers=5)
    # Samplers that take every anchor and proposal: their random choice (torch.randperm) would
    # draw from the device's generator, which is not CPU's.
    return detection.FasterRCNN(backbone, num_classes=3, min_size=64, max_size=64,
                                rpn_batch_size_per_image=100_000, box_batch_size_per_image=100_000,
                                rpn_pre_nms_top_n_train=300, rpn_post_nms_top_n_train=100,
                                rpn_pre_nms_top_n_test=300, rpn_post_nms_top_n_test=100)


def scenes(g):
    shots, targets = [], []
    for _ in range(2):
        xy = torch.rand(3, 2, generator=g) * 40
        boxes = torch.cat([xy, xy + 8 + torch.rand(3, 2, generator=g) * 16], 1)
        shots.append(torch.rand(3, 64, 64, generator=g))
        targets.append({"boxes": boxes, "labels": torch.randint(1, 3, (3,), generator=g)})
    return {"images": shots, "targets": targets}


def detection_loss(model, b):
    return sum(model(b["images"], b["targets"]).values())


def detect(model, b):
    return model(b["images"])


def segmentation_batch(g):
    return {"pixels": torch.randn(4, 3, 64, 64, generator=g), "masks": torch.randint(0, 3, (4, 64, 64), generator=g)}


def segmentation_loss(model, b):
    return F.cross_entropy(model(b["pixels"])["out"], b["masks"])


def segment(model, b):
    return model(b["pixels"])["out"]


# ---- speech (transformers) ----

def speech_batch(g):
    return {"input_values": torch.randn(2, 1600, generator=g), "labels": torch.randint(1, 32, (2, 5), generator=g)}


def transcribe(model, b):
    return model(b["input_values"]).logits


# ---- contrastive two-tower (transformers) ----

def pairs(g):
    return {"input_ids": torch.randint(3, 128, (4, 10), generator=g), "pixel_values": torch.randn(4, 3, 32, 32, generator=g),
            "return_loss": True}


def embed(model, b):
    out = model(input_ids=b["input_ids"], pixel_values=b["pixel_values"])
    return out.text_embeds, out.image_embeds


# ANCHOR: families
FAMILIES = {
    # Mixture of experts: a router picks 2 of 4 expert MLPs per token (top-k, scattered sums).
    "mixtral": Family(lambda: T.MixtralForCausalLM(T.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, vocab_size=128, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=1)), tokens, lm_loss, "generate"),
    # Detection: ResNet18 + FPN, anchors, RPN, RoIAlign over pyramid levels, NMS (torchvision's operators).
    "faster_rcnn": Family(faster_rcnn, scenes, detection_loss, detect),
    # Segmentation: MobileNetV3 with dilated convolutions, ASPP, bilinear upsampling.
    "deeplabv3": Family(lambda: segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=3), segmentation_batch, segmentation_loss, segment),
    # Speech: a convolutional feature extractor over raw audio, a weight-normed positional
    # convolution, a transformer encoder, CTC loss.
    "wav2vec2": Family(lambda: T.Wav2Vec2ForCTC(T.Wav2Vec2Config(
        vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, mask_time_prob=0.0, hidden_dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, pad_token_id=0,
        ctc_loss_reduction="mean")),
        speech_batch, lm_loss, transcribe),
    # State-space model: Mamba's selective scan (the sequential reference path) and causal conv1d.
    "mamba": Family(lambda: T.MambaForCausalLM(T.MambaConfig(
        vocab_size=128, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
        bos_token_id=0, eos_token_id=1, pad_token_id=0)), tokens, lm_loss, "generate"),
    # Encoder-decoder with cross-attention and learned positions.
    "bart": Family(lambda: T.BartForConditionalGeneration(T.BartConfig(
        vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, bos_token_id=0,
        eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=None)), tokens, lm_loss, "generate"),
    # Vision transformer with relative position biases (a learned table, gathered by index) and
    # shifted windows.
    "swin": Family(lambda: timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=10,
                                             img_size=64, window_size=4, embed_dim=32, depths=(1, 1, 2, 1),
                                             num_heads=(1, 2, 4, 8), drop_path_rate=0.0), images, classify, logits),
    # Dense connectivity: every layer's input is the concatenation of all before it.
    "densenet": Family(lambda: torchvision.models.DenseNet(growth_rate=8, block_config=(2, 3, 4, 2),
                                                           num_init_features=16, num_classes=10),
                       lambda g: images(g, n=4), classify, logits),
    # Grouped convolutions.
    "regnetx": Family(lambda: timm.create_model("regnetx_002", pretrained=False, num_classes=10),
                      lambda g: images(g, n=4), classify, logits),
    # Contrastive two towers: a text and an image transformer, a similarity matrix, symmetric
    # cross-entropy.
    "clip": Family(lambda: T.CLIPModel(T.CLIPConfig(
        text_config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=16, eos_token_id=2),
        vision_config=dict(hidden_size=32, image_size=32, patch_size=8, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64),
        projection_dim=16)), pairs, lm_loss, embed),
}
# ANCHOR_END: families


def move(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: move(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(v, device) for v in obj)
    return obj


def build(name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FAMILIES[name].make()
    # Dropout draws from the device's generator, which is not CPU's: a step could not match.
    # (Configs turn it off where they can; torchvision's segmentation heads cannot.)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def train(name, model, device, steps=2):
    family = FAMILIES[name]
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = move(family.batch(torch.Generator().manual_seed(1)), device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = family.loss(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses, model


def compare(got, expected, what):
    got = move(got, "cpu")
    if isinstance(expected, torch.Tensor):
        if expected.is_floating_point():
            torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4, msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(got, expected), what
    elif isinstance(expected, dict):
        assert got.keys() == expected.keys(), what
        for k in expected:
            compare(got[k], expected[k], f"{what}.{k}")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), what
        for i, (a, b) in enumerate(zip(got, expected)):
            compare(a, b, f"{what}[{i}]")


# ANCHOR: family_step
@pytest.mark.parametrize("name", FAMILIES)
def test_two_training_steps_then_inference_match_cpu(name):
    model = build(name)
    twin = copy.deepcopy(model)
    cpu_losses, cpu_model = train(name, model, "cpu")
    torch.openreg.reset_fallback_counts()
    losses, dev_model = train(name, twin, "openreg")
    assert set(torch.openreg.fallback_counts()) == set(), sorted(torch.openreg.fallback_counts())
    compare(losses, cpu_losses, "losses")
    cpu_params = dict(cpu_model.named_parameters())
    for key, p in dev_model.named_parameters():
        compare(p.detach(), cpu_params[key].detach(), key)

    family = FAMILIES[name]
    batch = family.batch(torch.Generator().manual_seed(2))
    cpu_model.eval()
    dev_model.eval()
    torch.openreg.reset_fallback_counts()
    with torch.no_grad():
        if family.infer == "generate":
            settings = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True)
            prompt = batch["input_ids"][:, :6]
            expected = cpu_model.generate(prompt, **settings)
            got = dev_model.generate(prompt.to("openreg"), **settings)
        else:
            expected = family.infer(cpu_model, batch)
            got = family.infer(dev_model, move(batch, "openreg"))
    assert set(torch.openreg.fallback_counts()) == set(), ("inference", sorted(torch.openreg.fallback_counts()))
    compare(got, expected, "inference")
# ANCHOR_END: family_step
