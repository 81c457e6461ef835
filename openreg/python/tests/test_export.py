"""torch.export and ONNX on the device: export, run_decompositions, ExportedProgram.module(),
save and load, dynamic batch sizes, and the ONNX exporter with ONNX's checker; where each
artifact records the device."""

import io
import logging
import warnings

import onnx
import pytest
import torch

warnings.filterwarnings("ignore", category=UserWarning)
logging.getLogger("torch.onnx").setLevel(logging.ERROR)


class Block(torch.nn.Module):
    """A small transformer block: attention, layer norms, a GELU MLP."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x), self.norm1(x), self.norm1(x), need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


MODELS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)),
            lambda: torch.randn(4, 12)),
    "cnn": (lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5)),
            lambda: torch.randn(2, 3, 8, 8)),
    "transformer_block": (Block, lambda: torch.randn(2, 5, 16)),
}


def model_and_input(name):
    torch.manual_seed(0)
    make, data = MODELS[name]
    return make().eval().to("openreg"), data().to("openreg")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_runs_on_the_device_and_matches_eager(name):
    model, x = model_and_input(name)
    ep = torch.export.export(model, (x,))
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    assert all(n.meta["val"].device == torch.device("openreg:0") for n in placeholders)
    assert all(t.device.type == "openreg" for t in ep.state_dict.values())
    with torch.no_grad():
        want = model(x).cpu()
        torch.testing.assert_close(ep.module()(x).cpu(), want, rtol=1e-5, atol=1e-5)
        core = ep.run_decompositions()
        torch.testing.assert_close(core.module()(x).cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_save_and_load_keep_the_device(name):
    model, x = model_and_input(name)
    ep = torch.export.export(model, (x,))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    assert all(t.device == torch.device("openreg:0") for t in loaded.state_dict.values())
    with torch.no_grad():
        torch.testing.assert_close(loaded.module()(x).cpu(), model(x).cpu(), rtol=1e-5, atol=1e-5)


def test_dynamic_batch():
    model, x = model_and_input("mlp")
    ep = torch.export.export(model, (x,), dynamic_shapes={"input": {0: torch.export.Dim("batch", min=1, max=64)}})
    for batch in (1, 7, 64):
        y = torch.randn(batch, 12, device="openreg")
        with torch.no_grad():
            torch.testing.assert_close(ep.module()(y).cpu(), model(y).cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_onnx_export_passes_the_checker(name):
    model, x = model_and_input(name)
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    onnx.checker.check_model(program.model_proto)
    # The initializers are the device's parameters, copied to the host.
    names = {init.name for init in program.model_proto.graph.initializer}
    weights = dict(model.named_parameters())
    for init in program.model_proto.graph.initializer:
        if init.name in weights:
            got = torch.from_numpy(onnx.numpy_helper.to_array(init).copy())
            torch.testing.assert_close(got, weights[init.name].detach().cpu())
    assert names


def test_an_exported_program_rejects_inputs_of_another_device():
    model, x = model_and_input("mlp")
    ep = torch.export.export(model, (x,))
    with pytest.raises(Exception):
        ep.module()(x.cpu())
