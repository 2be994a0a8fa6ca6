# SPDX-License-Identifier: Apache-2.0
# The convolution-family reference kernels (conv, conv_transpose, max_pool, avg_pool, the global
# pools, batch_norm, instance_norm, group_norm, resize, depth_to_space, space_to_depth, pad modes)
# against torch, through the real CLI: one .svasm program per dtype holds every case (1-D, 2-D and
# 3-D windows; strides, dilations, groups and depthwise, symmetric and asymmetric pads, every
# auto_pad, ceil_mode, count_include_pad, output_padding/output_shape, every resize mode and the
# coordinate modes exporters use) on fresh random data with odd sizes, and each output must match
# torch in float64 on the same (dtype-rounded) inputs. The numpy oracle (python/shapevm/ops.py)
# is checked against torch on the same cases.
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from svasm_harness import Prog, round_bf16, run_prog, token

torch = pytest.importorskip("torch")
F = torch.nn.functional

# max |error| / max(1, max |expected|) per output dtype
TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
SIZES = {1: (11,), 2: (7, 9), 3: (5, 6, 7)}
AUTO_PAD = {"NOTSET": 0, "SAME_UPPER": 1, "SAME_LOWER": 2, "VALID": 3}


def torch_pads(pairs):
    """(before, after) per spatial axis -> F.pad's reversed flat list."""
    out = []
    for before, after in reversed(pairs):
        out += [before, after]
    return out


def same_pads(sizes, kernel, stride, dilation, mode):
    pairs = []
    for i, k in zip(sizes, kernel):
        out = -(-i // stride)
        total = max(0, (out - 1) * stride + dilation * (k - 1) + 1 - i)
        before = total // 2 if mode == "SAME_UPPER" else total - total // 2
        pairs.append((before, total - before))
    return pairs


def resolve_pads(sizes, kernel, stride, dilation, pads, auto_pad):
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(sizes, kernel, stride, dilation, auto_pad)
    if auto_pad == "VALID" or pads is None:
        return [(0, 0)] * len(sizes)
    return pads


class Builder:
    """Collects the cases of one program: inputs (float64 values), the CallOp, the torch result."""

    def __init__(self, rng, dt):
        self.rng, self.dt = rng, dt
        self.prog = Prog()
        self.inputs = {}
        self.cases = []  # (label, expected float64 array, oracle thunk)

    def rounded(self, x):
        if self.dt == "f16":
            return x.astype(np.float16).astype(np.float64)
        if self.dt == "bf16":
            return round_bf16(x.astype(np.float32)).astype(np.float64)
        return x.astype(np.float32).astype(np.float64)

    def data(self, shape, low=None):
        x = self.rng.standard_normal(shape) if low is None else self.rng.uniform(low, 2.0, shape)
        return self.rounded(x)

    def feed(self, x):
        name = f"p{len(self.inputs)}"
        stored = x.astype(np.float16 if self.dt == "f16" else np.float32)
        self.inputs[name] = stored
        r = self.prog.tensor(name, token(stored))
        if self.dt == "bf16":
            r = self.prog.op("cast", r, dtype="bfloat16")
        return r

    def add(self, label, op, tensors, attrs, expected, oracle_args=None, ints=None):
        regs = [self.feed(t) if t is not None else "none" for t in tensors]
        if ints is not None:
            regs.insert(1, self.prog.ints(ints))
        r = self.prog.op(op, *regs, **attrs)
        if self.dt == "bf16":
            r = self.prog.op("cast", r, dtype="float32")
        self.prog.store(r)
        self.cases.append((label, np.asarray(expected, dtype=np.float64), op, oracle_args))


def t64(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def add_conv_cases(b):
    for dims in (1, 2, 3):
        sizes = SIZES[dims]
        for stride, dilation, groups, depthwise, pads, auto_pad, bias in [
            (1, 1, 1, False, None, "NOTSET", True),
            (2, 1, 1, False, "sym", "NOTSET", True),
            (2, 2, 2, False, "asym", "NOTSET", False),
            (1, 1, 4, True, "sym", "NOTSET", True),
            (2, 1, 1, False, None, "SAME_UPPER", True),
            (3, 1, 2, False, None, "SAME_LOWER", True),
            (2, 2, 1, False, None, "VALID", False),
        ]:
            channels = 4
            out_channels = 8 if depthwise else 6
            kernel = (3,) * dims if dims != 1 else (4,)
            x = b.data((2, channels) + sizes)
            w = b.data((out_channels, channels // groups) + kernel)
            bias_v = b.data((out_channels,)) if bias else None
            pairs = None
            if pads == "sym":
                pairs = [(1, 1)] * dims
            elif pads == "asym":
                pairs = [(2, 1), (0, 1), (1, 0)][:dims]
            resolved = resolve_pads(sizes, kernel, stride, dilation, pairs, auto_pad)
            xp = F.pad(t64(x), torch_pads(resolved))
            want = CONV[dims](xp, t64(w), None if bias_v is None else t64(bias_v), stride=stride, dilation=dilation,
                              groups=groups)
            attrs = {"strides": [stride] * dims, "dilations": [dilation] * dims, "groups": groups,
                     "auto_pad": AUTO_PAD[auto_pad]}
            if pairs is not None:
                attrs["pads"] = list(itertools.chain(*pairs))
            b.add(f"conv{dims}d s{stride} d{dilation} g{groups} {pads} {auto_pad}", "conv", [x, w, bias_v], attrs,
                  want.numpy(), ([x, w, bias_v], attrs))


def add_conv_transpose_cases(b):
    for dims in (1, 2, 3):
        sizes = SIZES[dims]
        for stride, dilation, groups, pads, extra, output_shape, auto_pad in [
            (1, 1, 1, None, 0, None, "NOTSET"),
            (2, 1, 1, [(1, 1)], 1, None, "NOTSET"),
            (2, 2, 2, [(2, 0)], 1, None, "NOTSET"),
            (3, 1, 1, None, 0, "target", "NOTSET"),
            (2, 1, 2, None, 0, None, "SAME_UPPER"),
            (2, 1, 1, None, 0, None, "SAME_LOWER"),
        ]:
            kernel = (3,) * dims
            x = b.data((2, 4) + sizes)
            w = b.data((4, 6 // groups) + kernel)
            bias_v = b.data((6,))
            full = [stride * (i - 1) + dilation * (k - 1) + 1 + extra for i, k in zip(sizes, kernel)]
            attrs = {"strides": [stride] * dims, "dilations": [dilation] * dims, "groups": groups,
                     "auto_pad": AUTO_PAD[auto_pad], "output_padding": [extra] * dims}
            if output_shape == "target" or auto_pad != "NOTSET":
                target = [f - 2 for f in full] if output_shape else [i * stride for i in sizes]
                if output_shape:
                    attrs["output_shape"] = target
                pairs = []
                for f, o in zip(full, target):
                    total = f - o
                    before = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
                    pairs.append((before, total - before))
            else:
                pairs = (pads or [(0, 0)]) * (dims if pads is None or len(pads) == 1 else 1)
                if pads is not None:
                    attrs["pads"] = list(itertools.chain(*pairs))
            y = CONV_T[dims](t64(x), t64(w), t64(bias_v), stride=stride, dilation=dilation, groups=groups,
                             output_padding=extra)
            crop = tuple(slice(p[0], f - p[1]) for p, f in zip(pairs, full))
            want = y[(slice(None), slice(None)) + crop]
            b.add(f"conv_transpose{dims}d s{stride} d{dilation} g{groups} {pads} {output_shape} {auto_pad}",
                  "conv_transpose", [x, w, bias_v], attrs, want.numpy(), ([x, w, bias_v], attrs))


def add_pool_cases(b):
    for dims in (1, 2, 3):
        sizes = SIZES[dims]
        x = b.data((2, 3) + sizes)
        for k, s, p, d, ceil, auto_pad in [
            (2, 2, 0, 1, False, "NOTSET"),
            (3, 2, 1, 1, True, "NOTSET"),
            (3, 1, 1, 2, False, "NOTSET"),
            (3, 2, 0, 1, False, "SAME_UPPER"),
            (2, 3, 0, 1, False, "SAME_LOWER"),
            (3, 2, 0, 1, True, "VALID"),
        ]:
            kernel = [k] * dims
            resolved = resolve_pads(sizes, kernel, s, d, [(p, p)] * dims, auto_pad)
            attrs = {"kernel": kernel, "strides": [s] * dims, "ceil_mode": ceil, "auto_pad": AUTO_PAD[auto_pad]}
            if auto_pad == "NOTSET":
                attrs["pads"] = [p] * dims
            xp = F.pad(t64(x), torch_pads(resolved), value=-np.inf)
            want = MAX_POOL[dims](xp, k, s, 0, d, ceil_mode=ceil)
            b.add(f"max_pool{dims}d k{k} s{s} p{p} d{d} ceil{ceil} {auto_pad}", "max_pool", [x],
                  {**attrs, "dilations": [d] * dims}, want.numpy(), ([x], {**attrs, "dilations": [d] * dims}))
            if d != 1:
                continue
            for include in (False, True):
                if auto_pad == "NOTSET":
                    want = AVG_POOL[dims](t64(x), k, s, p, ceil_mode=ceil, count_include_pad=include)
                else:  # explicit resolved pads: the divisor counts pads only with count_include_pad
                    ones = torch.ones_like(t64(x))
                    total = AVG_POOL[dims](F.pad(t64(x), torch_pads(resolved)), k, s, 0, ceil_mode=ceil,
                                           count_include_pad=True)
                    count = AVG_POOL[dims](F.pad(ones, torch_pads(resolved), value=1.0 if include else 0.0), k, s, 0,
                                           ceil_mode=ceil, count_include_pad=True)
                    want = total / count
                b.add(f"avg_pool{dims}d k{k} s{s} p{p} ceil{ceil} include{include} {auto_pad}", "avg_pool", [x],
                      {**attrs, "count_include_pad": include}, want.numpy(),
                      ([x], {**attrs, "count_include_pad": include}))
        axes = tuple(range(2, 2 + dims))
        b.add(f"global_avg_pool{dims}d", "global_avg_pool", [x], {}, t64(x).mean(dim=axes, keepdim=True).numpy(),
              ([x], {}))
        b.add(f"global_max_pool{dims}d", "global_max_pool", [x], {}, t64(x).amax(dim=axes, keepdim=True).numpy(),
              ([x], {}))


def add_norm_cases(b):
    for shape in ((3, 5), (2, 6, 7), (2, 6, 5, 3), (1, 6, 3, 4, 5)):
        x = b.data(shape)
        c = shape[1]
        scale, shift, mean, var = b.data((c,)), b.data((c,)), b.data((c,)), b.data((c,), low=0.5)
        want = F.batch_norm(t64(x), t64(mean), t64(var), t64(scale), t64(shift), training=False, eps=1e-3)
        b.add(f"batch_norm {shape}", "batch_norm", [x, scale, shift, mean, var], {"eps": 1e-3}, want.numpy(),
              ([x, scale, shift, mean, var], {"eps": 1e-3}))
        if len(shape) < 3:
            continue
        want = F.instance_norm(t64(x), weight=t64(scale), bias=t64(shift), eps=1e-5)
        b.add(f"instance_norm {shape}", "instance_norm", [x, scale, shift], {}, want.numpy(), ([x, scale, shift], {}))
        for groups, affine in ((3, True), (2, False), (6, True)):
            want = F.group_norm(t64(x), groups, t64(scale) if affine else None, t64(shift) if affine else None, eps=1e-4)
            tensors = [x, scale, shift] if affine else [x, None, None]
            b.add(f"group_norm {shape} g{groups}", "group_norm", tensors, {"groups": groups, "eps": 1e-4},
                  want.numpy(), (tensors, {"groups": groups, "eps": 1e-4}))


def add_resize_cases(b):
    x2 = b.data((2, 3, 5, 7))
    x3 = b.data((1, 2, 3, 4, 5))
    # (x, sizes, torch mode, align_corners, ShapeVM mode, coordinate_mode, nearest_mode)
    for x, size, tmode, align, mode, coord, nearest in [
        (x2, (9, 4), "nearest", None, 0, 1, 2),          # torch nearest: asymmetric + floor
        (x2, (11, 15), "nearest-exact", None, 0, 0, 1),  # half_pixel + round_prefer_ceil
        (x2, (3, 13), "bilinear", False, 1, 0, 0),
        (x2, (10, 3), "bilinear", True, 1, 2, 0),
        (x2, (8, 11), "bicubic", False, 2, 0, 0),
        (x2, (4, 9), "bicubic", True, 2, 2, 0),
        (x3, (5, 2, 9), "trilinear", False, 1, 3, 0),
    ]:
        want = F.interpolate(t64(x), size=size, mode=tmode, align_corners=align)
        attrs = {"mode": mode, "coordinate_mode": coord, "nearest_mode": nearest}
        b.add(f"resize {tmode} {size} align{align}", "resize", [x], attrs, want.numpy(), ([x], attrs, list(size)),
              ints=list(size))
    # scales (a tensor input over all axes), as torch's scale_factor with half_pixel linear
    scales = np.array([1.0, 1.0, 2.0, 1.5])
    want = F.interpolate(t64(x2), scale_factor=(2.0, 1.5), mode="bilinear", align_corners=False)
    label = "resize scales"
    regs = [b.feed(x2), "none", b.prog.tensor(f"p{len(b.inputs)}", token(scales.astype(np.float32)))]
    b.inputs[f"p{len(b.inputs)}"] = scales.astype(np.float32)
    r = b.prog.op("resize", *regs, mode=1)
    if b.dt == "bf16":
        r = b.prog.op("cast", r, dtype="float32")
    b.prog.store(r)
    b.cases.append((label, want.numpy(), None, None))


def add_shuffle_and_pad_cases(b):
    x = b.data((2, 8, 3, 5))
    b.add("depth_to_space CRD", "depth_to_space", [x], {"blocksize": 2, "mode": 1}, F.pixel_shuffle(t64(x), 2).numpy(),
          ([x], {"blocksize": 2, "mode": 1}))
    n, c, h, w = x.shape
    dcr = x.reshape(n, 2, 2, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * 2, w * 2)
    b.add("depth_to_space DCR", "depth_to_space", [x], {"blocksize": 2}, dcr, ([x], {"blocksize": 2}))
    y = b.data((2, 3, 6, 9))
    n, c, h, w = y.shape
    s2d = y.reshape(n, c, h // 3, 3, w // 3, 3).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * 9, h // 3, w // 3)
    b.add("space_to_depth", "space_to_depth", [y], {"blocksize": 3}, s2d, ([y], {"blocksize": 3}))
    for shape in ((2, 3, 7), (2, 3, 5, 6), (1, 2, 4, 5, 6)):
        z = b.data(shape)
        spatial = [(1, 2), (2, 0), (0, 3)][:len(shape) - 2]
        pads = [0, 0, 0, 0] + list(itertools.chain(*spatial))
        for mode, tmode in ((1, "reflect"), (2, "replicate")):
            want = F.pad(t64(z), torch_pads(spatial), mode=tmode)
            b.add(f"pad {tmode} {shape}", "pad", [z], {"pads": pads, "mode": mode}, want.numpy(),
                  ([z], {"pads": [tuple(p) for p in zip(pads[0::2], pads[1::2])], "mode": mode}))


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_conv_family_matches_torch(shapevm_bin, tmp_path, dt):
    b = Builder(np.random.default_rng(), dt)
    for add in (add_conv_cases, add_conv_transpose_cases, add_pool_cases, add_norm_cases, add_resize_cases,
                add_shuffle_and_pad_cases):
        add(b)
    code, outs, err = run_prog(shapevm_bin, tmp_path, b.prog, b.inputs)
    assert code == 0, err
    assert len(outs) == len(b.cases)
    failures = []
    for (label, want, _, _), got in zip(b.cases, outs):
        if got.shape != want.shape:
            failures.append(f"{label}: shape {got.shape}, torch {want.shape}")
            continue
        err = np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want))))
        if not err <= TOL[dt]:
            failures.append(f"{label}: error {err:.2e}")
    assert not failures, "\n".join(failures)


def test_numpy_oracle_matches_torch():
    """python/shapevm/ops.py's versions of these ops (the frontend corpus's CPython side) agree with torch."""
    if str(Path(__file__).resolve().parents[2] / "python") not in sys.path:  # as frontend_harness does
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from shapevm import ops  # pylint: disable=import-outside-toplevel

    b = Builder(np.random.default_rng(7), "f32")
    for add in (add_conv_cases, add_conv_transpose_cases, add_pool_cases, add_norm_cases, add_resize_cases,
                add_shuffle_and_pad_cases):
        add(b)
    checked = 0
    for label, want, op, args in b.cases:
        if op is None:
            continue
        tensors, attrs = args[0], dict(args[1])
        extra = [args[2]] if len(args) > 2 else []
        arrays = [None if t is None else t.astype(np.float32) for t in tensors]
        got = np.asarray(getattr(ops, op)(arrays[0], *extra, *arrays[1:], **attrs), dtype=np.float64)
        assert got.shape == want.shape, label
        assert np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))) <= 1e-5, label
        checked += 1
    assert checked > 100
