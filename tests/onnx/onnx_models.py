# SPDX-License-Identifier: Apache-2.0
# torch.nn modules the ONNX import tests export with torch.onnx.export (Debian's python3-torch),
# with random weights and dynamic axes, and the helper that exports one. Each entry names its
# inputs, dynamic axes and the shapes the tests run it at (>= 3 values per dynamic axis).
import warnings

import torch
import torch.nn as nn


class Mlp(nn.Module):
    """Linear -> ReLU -> LayerNorm -> Linear -> softmax."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return torch.softmax(self.fc2(self.norm(torch.relu(self.fc1(x)))), dim=-1)


class Block(nn.Module):
    """Pre-norm transformer block: reshapes from x.shape, softmax attention, GELU (erf) MLP."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(dim, dim=-1)
        head = dim // self.heads

        def split_heads(t):
            return t.reshape(batch, seq, self.heads, head).transpose(1, 2)

        q, k, v = split_heads(q), split_heads(k), split_heads(v)
        attn = torch.softmax(q @ k.transpose(-2, -1) / head ** 0.5, dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(batch, seq, dim)
        x = x + self.proj(y)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class Lstm(nn.Module):
    def __init__(self, inputs=8, hidden=16):
        super().__init__()
        self.rnn = nn.LSTM(inputs, hidden, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class BiLstm(nn.Module):
    """Two stacked bidirectional LSTM layers: ONNX LSTM with direction=bidirectional."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, h


class LanguageModel(nn.Module):
    """Embedding -> GRU -> linear head over the vocabulary, fed int64 token ids."""

    def __init__(self, vocab=50):
        super().__init__()
        self.embed = nn.Embedding(vocab, 12)
        self.rnn = nn.GRU(12, 20, batch_first=True)
        self.head = nn.Linear(20, vocab)

    def forward(self, ids):
        y, _ = self.rnn(self.embed(ids))
        return self.head(y)


# name -> (module class, example input maker, dynamic axes, shapes to run)
MODELS = {
    "mlp": (Mlp, lambda s: torch.randn(*s), {0: "batch"}, [(1, 16), (4, 16), (9, 16)]),
    "block": (Block, lambda s: torch.randn(*s), {0: "batch", 1: "seq"}, [(1, 5, 32), (2, 9, 32), (3, 16, 32)]),
    "lstm": (Lstm, lambda s: torch.randn(*s), {0: "batch", 1: "seq"}, [(1, 50, 8), (2, 57, 8), (3, 64, 8)]),
    "bilstm": (BiLstm, lambda s: torch.randn(*s), {0: "batch", 1: "seq"}, [(1, 50, 8), (2, 53, 8), (3, 56, 8)]),
    "gru": (Gru, lambda s: torch.randn(*s), {0: "batch", 1: "seq"}, [(1, 50, 8), (2, 57, 8), (3, 64, 8)]),
    "lm": (LanguageModel, lambda s: torch.randint(0, 50, s), {0: "batch", 1: "seq"}, [(1, 50), (2, 55), (3, 60)]),
}


def sizes_example(name, sizes):
    """A small example input for a model built with non-default sizes."""
    if name == "lstm":
        return (2, 5, sizes.get("inputs", 8))
    return (2, 5, sizes.get("dim", 32))


def export(name, path, opset=14, **sizes):
    """Exports MODELS[name] (constructor arguments `sizes`) with seeded random weights; returns
    the eval-mode module."""
    cls, make, axes, shapes = MODELS[name]
    torch.manual_seed(0)
    module = cls(**sizes).eval()
    example = make(shapes[0]) if not sizes else make(sizes_example(name, sizes))
    outputs = module(example)
    count = len(outputs) if isinstance(outputs, tuple) else 1
    output_names = [f"y{i}" for i in range(count)]
    with warnings.catch_warnings():  # the exporter's tracer warnings are about torch, not us
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), input_names=["x"], output_names=output_names,
                          dynamic_axes={"x": axes}, opset_version=opset)
    return module
