"""Scaled dot-product attention on openreg against the CPU (its flash attention), in one run:
the forward pass and forward plus backward, with query, key and value taken from one
projection as models take them, at the heads of the zoo's language and vision models and
beyond (longer sequences, where the device's matrix-product path takes over).

`python bench/attention.py` prints the table (`make bench` runs it).
"""

import torch
import torch.nn.functional as F

from operators import per_call  # batches ended by a synchronize, after a warm-up

# (batch, sequence, heads, head size, causal, the model whose heads these are)
SHAPES = [(2, 12, 4, 16, True, "gpt2 in the zoo"), (8, 12, 4, 16, True, "gpt2, batch 8"),
          (32, 17, 3, 64, False, "vit_tiny, batch 32"), (4, 32, 8, 32, False, ""), (8, 64, 4, 64, True, ""),
          (2, 128, 12, 64, True, "gpt2-small's heads"), (1, 256, 4, 64, False, "")]


def passes(device, batch, length, heads, size, causal):
    torch.manual_seed(0)
    x = torch.randn(batch, length, 3 * heads * size, device=device, requires_grad=True)
    grad = torch.randn(batch, length, heads * size, device=device)

    def forward():
        q, k, v = x.reshape(batch, length, 3, heads, size).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return out.transpose(1, 2).reshape(batch, length, heads * size)
    return {"forward": lambda: forward().detach(), "fwd + bwd": lambda: forward().backward(grad)}


def main():
    print(f"torch {torch.__version__}; time per call, median of 9 batches of 10; ratio = openreg / CPU")
    print(f"{'batch x sequence x heads x size':<34} {'pass':<10} {'CPU':>9} {'openreg':>9} {'ratio':>6}  model")
    for batch, length, heads, size, causal, model in SHAPES:
        on = {device: passes(device, batch, length, heads, size, causal) for device in ("cpu", "openreg")}
        for name in on["cpu"]:
            cpu = per_call(on["cpu"][name], "cpu", 10)
            dev = per_call(on["openreg"][name], "openreg", 10)
            case = f"{batch}x{length}x{heads}x{size}" + (" causal" if causal else "")
            print(f"{case:<34} {name:<10} {cpu * 1e6:>7.0f}us {dev * 1e6:>7.0f}us {dev / cpu:>5.2f}x  {model}")


if __name__ == "__main__":
    main()
