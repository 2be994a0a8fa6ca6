# SPDX-License-Identifier: Apache-2.0
# A numpy-backed `ops` namespace with ShapeVM's semantics (src/ops/ops.def), so a ShapeVM Python
# source file also runs under CPython as a test oracle. `Tensor` is a thin ndarray subclass: it is
# the annotation (`Tensor[None, "seq", 128]` is a no-op) and the value type whose operators and
# methods (.T .shape .sum .reshape .unsqueeze .astype ...) follow ShapeVM, not numpy, where they differ.
"""ShapeVM's `ops` namespace on numpy, for tests.

Semantics follow src/ops/ops.def and the kernels: torch-like dtype promotion by category
(int64 + float32 -> float32, float16 + bfloat16 -> float32), weak Python scalars (a float
scalar next to an int tensor gives float32, an int scalar keeps the tensor's dtype), integer
division truncating toward zero, transcendental ops on int/bool inputs computing in float32,
int/bool sums in int64 and int/bool means in float32, casts that truncate toward zero and
saturate (NaN -> 0), and randn drawing from mt19937_64 with ShapeVM's own Box-Muller (bit-exact).
Float math is done in float64 and rounded once to the result dtype. bfloat16 is emulated: the
data are float32 values rounded to bfloat16 (round to nearest even) and the tensor is flagged.
"""
import builtins as _b
import math as _math

import numpy as _np

__all__ = [
    "Tensor", "DType", "float32", "float16", "bfloat16", "float64", "int32", "int64", "bool",
    "matmul", "add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid",
    "tanh", "relu", "gelu", "erf", "silu", "maximum", "minimum", "where", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "cast", "reshape",
    "transpose", "squeeze", "unsqueeze", "split", "concat", "stack", "gather", "broadcast_to", "pad", "sum",
    "mean", "max", "min", "argmax", "softmax", "log_softmax", "layer_norm", "identity", "contiguous", "zeros",
    "ones", "full", "arange", "randn", "add_n",
    "conv", "conv_transpose", "max_pool", "avg_pool", "global_avg_pool", "global_max_pool", "batch_norm",
    "instance_norm", "group_norm", "resize", "depth_to_space", "space_to_depth",
]


# ---------------------------------------------------------------------------------------------
# dtypes

class DType:
    """A ShapeVM dtype: its name and the numpy dtype that stores it (bfloat16 is stored as float32)."""

    def __init__(self, name, storage, rank):
        self.name = name
        self.storage = _np.dtype(storage)
        self.rank = rank  # promotion category order (kernel_util.cc promoteTypes)

    @property
    def is_float(self):
        return self.rank >= 3

    def __repr__(self):
        return f"ops.{self.name}"


bool = DType("bool", _np.bool_, 0)  # noqa: A001 - the subset spells it ops.bool
int32 = DType("int32", _np.int32, 1)
int64 = DType("int64", _np.int64, 2)
bfloat16 = DType("bfloat16", _np.float32, 3)
float16 = DType("float16", _np.float16, 3)
float32 = DType("float32", _np.float32, 4)
float64 = DType("float64", _np.float64, 5)
_BY_NUMPY = {d.storage: d for d in (bool, int32, int64, float16, float32, float64)}


def _dtype_of(name_or_dtype):
    if isinstance(name_or_dtype, DType):
        return name_or_dtype
    if isinstance(name_or_dtype, str):
        return globals()[name_or_dtype]
    return _BY_NUMPY[_np.dtype(name_or_dtype)]


def _promote(a, b):
    if a is b:
        return a
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.rank >= b.rank else b


def round_bf16(x):
    """float values -> nearest bfloat16 (round to nearest even), returned as float32 storage."""
    x = _np.array(x, dtype=_np.float32)
    bits = x.reshape(-1).view(_np.uint32).astype(_np.uint64)
    nan = _np.isnan(x.reshape(-1))
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = (bits & 0xFFFFFFFF).astype(_np.uint32).view(_np.float32)
    out = _np.where(nan, _np.float32(_np.nan), out)
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Tensor

class Tensor(_np.ndarray):
    """A numpy array with ShapeVM operators. `Tensor[...]` (an annotation) is Tensor itself.

    numpy ufuncs are switched off (`__array_ufunc__ = None`), so every operator lands in the
    methods below and mixed numpy/Tensor expressions never silently use numpy's promotion."""

    __array_ufunc__ = None
    _bf16 = False

    def __class_getitem__(cls, item):
        return cls

    def __array_finalize__(self, obj):
        self._bf16 = getattr(obj, "_bf16", False)

    # --- dtype and display
    @property
    def svm_dtype(self):
        return bfloat16 if self._bf16 else _BY_NUMPY[self.dtype]

    def numpy(self):
        """A plain numpy array (bfloat16 comes out as its float32 storage)."""
        return _np.array(self)

    def __repr__(self):
        return f"Tensor({_np.asarray(self)!r}, svm_dtype={self.svm_dtype!r})"

    __str__ = __repr__

    # --- arithmetic: never in place (`x += y` rebinds x, as in ShapeVM)
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    __iadd__, __isub__, __imul__, __itruediv__ = __add__, __sub__, __mul__, __truediv__
    __ipow__, __imatmul__ = __pow__, __matmul__

    def __neg__(self): return neg(self)
    def __pos__(self): return self
    def __abs__(self): return abs(self)
    def __lt__(self, o): return less(self, o)
    def __le__(self, o): return less_equal(self, o)
    def __gt__(self, o): return greater(self, o)
    def __ge__(self, o): return greater_equal(self, o)
    def __eq__(self, o): return equal(self, o)
    def __ne__(self, o): return not_equal(self, o)
    __hash__ = None

    def _unsupported(self, *_):
        raise TypeError("`//` and `%` are scalar-only in ShapeVM (no tensor op)")

    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __ifloordiv__ = __imod__ = _unsupported

    # --- indexing: an integer index of a 1-D tensor is a 0-d tensor, not a numpy scalar
    def __getitem__(self, key):
        out = _np.ndarray.__getitem__(self, key)
        if not isinstance(out, _np.ndarray):
            out = _np.asarray(out).view(Tensor)
            out._bf16 = self._bf16
        return out

    # --- methods of the subset
    def sum(self, axis=None, keepdims=False): return sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return min(self, axis, keepdims)

    def reshape(self, *shape):
        return reshape(self, shape[0] if len(shape) == 1 else shape)

    def squeeze(self, axis=None): return squeeze(self, axis)
    def unsqueeze(self, axis): return unsqueeze(self, axis)

    def transpose(self, *perm):
        return transpose(self, perm[0] if len(perm) == 1 and not isinstance(perm[0], int) else perm)

    def contiguous(self): return contiguous(self)

    def astype(self, dtype, *args, **kwargs):
        if isinstance(dtype, DType):
            return cast(self, dtype)
        return _np.ndarray.astype(self, dtype, *args, **kwargs)  # numpy internals


def _wrap(arr, dt):
    """numpy values -> a Tensor of ShapeVM dtype `dt` (converted with ShapeVM cast rules)."""
    arr = _np.asarray(arr)
    src = _np.dtype(arr.dtype)
    if dt.is_float:
        out = arr.astype(dt.storage)
        if dt is bfloat16:
            out = round_bf16(out)
    elif dt is bool:
        out = arr != 0
    elif src.kind == "f":
        out = _float_to_int(arr.astype(_np.float64), dt)
    else:
        out = arr.astype(dt.storage)  # int -> int wraps (int64 -> int32), like the cast kernel
    t = _np.asarray(out).view(Tensor)
    t._bf16 = dt is bfloat16
    return t


def _float_to_int(v, dt):
    """Truncation toward zero, NaN -> 0, saturation at the int range."""
    info = _np.iinfo(dt.storage)
    v = _np.where(_np.isnan(v), 0.0, _np.trunc(v))
    big, small = v >= float(info.max) + 1.0, v < float(info.min)
    safe = _np.where(big | small, 0.0, v).astype(dt.storage)
    return _np.where(big, info.max, _np.where(small, info.min, safe)).astype(dt.storage)


def _like(arr, x):
    """A Tensor view/result of numpy `arr` with x's dtype flags (for data-movement ops)."""
    t = _np.asarray(arr).view(Tensor)
    t._bf16 = getattr(x, "_bf16", False)
    return t


def _scalar_dtype(v):
    if isinstance(v, (_b.bool, _np.bool_)):
        return bool
    if isinstance(v, (int, _np.integer)):
        return int64
    if isinstance(v, (float, _np.floating)):
        return float32
    raise TypeError(f"expected a tensor or a scalar, got {type(v).__name__}")


def _tensor(v, like=None):
    """An op operand as a Tensor; Python scalars are weak 0-d tensors (kernel_util.cc tensorArg)."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, _np.ndarray):
        return v.view(Tensor)
    dt = _scalar_dtype(v)
    if like is not None:
        other = like.svm_dtype if isinstance(like, Tensor) else None
        if other is not None:
            if dt is float32 and not other.is_float:
                dt = float32
            elif dt is int64 and other is bool:
                dt = int64
            else:
                dt = other
    return _wrap(_np.asarray(float(v) if dt.is_float else v), dt)


def _pair(a, b):
    """Two elementwise operands; a Python scalar takes its dtype from the other operand (weak)."""
    a = a.view(Tensor) if isinstance(a, _np.ndarray) and not isinstance(a, Tensor) else a
    b = b.view(Tensor) if isinstance(b, _np.ndarray) and not isinstance(b, Tensor) else b
    ta = _tensor(a, b if isinstance(b, Tensor) else None)
    return ta, _tensor(b, ta)


def _compute(t, dt):
    """Values of tensor t converted to dtype dt, as float64 (float dt), int64 (ints) or bool."""
    v = _wrap(_np.asarray(t), dt) if t.svm_dtype is not dt else t
    v = _np.asarray(v)
    if dt.is_float:
        return v.astype(_np.float64)
    if dt is bool:
        return v.astype(_np.bool_)
    return v.astype(_np.int64)


def _ints(v, what="shape"):
    """An `ints` operand: an int, a tuple/list of ints (or 0-d int tensors) or a 1-D int tensor."""
    if isinstance(v, (int, _np.integer)) and not isinstance(v, (_b.bool, _np.bool_)):
        return [int(v)]
    if isinstance(v, _np.ndarray):
        return [int(e) for e in _np.asarray(v).reshape(-1)]
    if isinstance(v, (tuple, list)):
        return [int(e) for e in v]
    raise TypeError(f"{what}: expected ints, got {type(v).__name__}")


def _axes(axis):
    if axis is None:
        return None
    return tuple(_ints(axis, "axis"))


# ---------------------------------------------------------------------------------------------
# elementwise binary

def _binary(a, b, fn, result=None, no_bool=False):
    ta, tb = _pair(a, b)
    dt = _promote(ta.svm_dtype, tb.svm_dtype)
    if no_bool and dt is bool:
        raise TypeError(f"{fn.__name__} is not defined on bool tensors")
    va, vb = _compute(ta, dt), _compute(tb, dt)
    with _np.errstate(all="ignore"):
        out = fn(va, vb, dt)
    return _wrap(out, result or dt)


def _trunc_div(a, b, dt):
    if dt.is_float:
        return a / b
    if _np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    q = _np.abs(a) // _np.abs(b)
    return _np.where((a < 0) != (b < 0), -q, q)


def add(a, b):
    return _binary(a, b, lambda x, y, dt: _np.logical_or(x, y) if dt is bool else x + y)


def sub(a, b):
    return _binary(a, b, lambda x, y, dt: x - y, no_bool=True)


def mul(a, b):
    return _binary(a, b, lambda x, y, dt: _np.logical_and(x, y) if dt is bool else x * y)


def div(a, b):
    """a / b; integer tensors divide truncating toward zero (ONNX Div)."""
    return _binary(a, b, _trunc_div, no_bool=True)


def pow(a, b):  # noqa: A001
    return _binary(a, b, lambda x, y, dt: _np.power(x, y), no_bool=True)


def maximum(a, b):
    return _binary(a, b, lambda x, y, dt: _np.maximum(x, y))


def minimum(a, b):
    return _binary(a, b, lambda x, y, dt: _np.minimum(x, y))


def equal(a, b): return _binary(a, b, lambda x, y, dt: x == y, bool)
def not_equal(a, b): return _binary(a, b, lambda x, y, dt: x != y, bool)
def less(a, b): return _binary(a, b, lambda x, y, dt: x < y, bool)
def less_equal(a, b): return _binary(a, b, lambda x, y, dt: x <= y, bool)
def greater(a, b): return _binary(a, b, lambda x, y, dt: x > y, bool)
def greater_equal(a, b): return _binary(a, b, lambda x, y, dt: x >= y, bool)


def _logical(a, b, fn):
    ta, tb = _pair(a, b)
    if ta.svm_dtype is not bool or tb.svm_dtype is not bool:
        raise TypeError(f"logical ops take bool tensors, got {ta.svm_dtype} and {tb.svm_dtype}")
    return _wrap(fn(_np.asarray(ta), _np.asarray(tb)), bool)


def logical_and(a, b): return _logical(a, b, _np.logical_and)
def logical_or(a, b): return _logical(a, b, _np.logical_or)


def matmul(a, b):
    ta, tb = _tensor(a), _tensor(b)
    dt = _promote(ta.svm_dtype, tb.svm_dtype)
    return _wrap(_np.matmul(_compute(ta, dt), _compute(tb, dt)), dt)


def add_n(*xs):
    """Sum of all inputs with broadcasting (what `a + b + c` becomes)."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    out = xs[0]
    for x in xs[1:]:
        out = add(out, x)
    return _tensor(out)


# ---------------------------------------------------------------------------------------------
# elementwise unary

def _unary(x, fn, transcendental=True, no_bool=False):
    t = _tensor(x)
    dt = t.svm_dtype
    if transcendental and not dt.is_float:
        dt = float32  # elementwise_ops.cc: int/bool inputs are computed in float32
    if no_bool and dt is bool:
        raise TypeError("not defined on bool tensors")
    with _np.errstate(all="ignore"):
        out = fn(_compute(t, dt))
    return _wrap(out, dt)


_erf = _np.vectorize(_math.erf, otypes=[_np.float64])


def neg(x): return _unary(x, _np.negative, False, no_bool=True)
def abs(x): return _unary(x, _np.abs, False)  # noqa: A001
def relu(x): return _unary(x, lambda v: _np.maximum(v, 0), False)
def exp(x): return _unary(x, _np.exp)
def log(x): return _unary(x, _np.log)
def sqrt(x): return _unary(x, _np.sqrt)
def rsqrt(x): return _unary(x, lambda v: 1.0 / _np.sqrt(v))
def sigmoid(x): return _unary(x, lambda v: 1.0 / (1.0 + _np.exp(-v)))
def tanh(x): return _unary(x, _np.tanh)
def erf(x): return _unary(x, _erf)
def gelu(x): return _unary(x, lambda v: 0.5 * v * (1.0 + _erf(v / _math.sqrt(2.0))))
def silu(x): return _unary(x, lambda v: v / (1.0 + _np.exp(-v)))


def logical_not(x):
    t = _tensor(x)
    if t.svm_dtype is not bool:
        raise TypeError(f"logical_not takes a bool tensor, got {t.svm_dtype}")
    return _wrap(_np.logical_not(_np.asarray(t)), bool)


def where(cond, a, b):
    """cond ? a : b; a non-bool condition counts nonzero as true; a and b promote like a binary op."""
    c = _np.asarray(_tensor(cond)) != 0
    ta, tb = _pair(a, b)
    dt = _promote(ta.svm_dtype, tb.svm_dtype)
    return _wrap(_np.where(c, _compute(ta, dt), _compute(tb, dt)), dt)


def cast(x, dtype):
    """Convert to dtype: float -> int truncates toward zero and saturates, NaN -> 0; -> bool is x != 0."""
    t = _tensor(x)
    return _wrap(_np.asarray(t), _dtype_of(dtype))


# ---------------------------------------------------------------------------------------------
# shape and data movement

def reshape(x, shape):
    t = _tensor(x)
    return _like(_np.reshape(_np.asarray(t), _ints(shape)), t)


def transpose(x, perm=None):
    t = _tensor(x)
    p = _ints(perm, "perm") if perm is not None else []
    if sorted(q % _b.max(t.ndim, 1) for q in p) != list(range(len(p))) or (p and len(p) != t.ndim):
        raise ValueError(f"transpose: perm {p} is not a permutation of the {t.ndim} axes")
    return _like(_np.transpose(_np.asarray(t), p or None), t)


def squeeze(x, axis=None):
    t = _tensor(x)
    return _like(_np.squeeze(_np.asarray(t), _axes(axis)), t)


def unsqueeze(x, axis):
    """Insert size-1 axes at the given output positions (numpy expand_dims)."""
    t = _tensor(x)
    return _like(_np.expand_dims(_np.asarray(t), _axes(axis)), t)


def split(x, sections_or_sizes, axis=0):
    """`sections` equal parts (an int) or parts of the given sizes (a list/tuple); returns a tuple."""
    t = _tensor(x)
    a = _np.asarray(t)
    if isinstance(sections_or_sizes, (int, _np.integer)):
        n = int(sections_or_sizes)
        if n <= 0 or a.shape[axis] % n != 0:
            raise ValueError(f"split: axis {axis} of extent {a.shape[axis]} does not split into {n} equal parts")
        parts = _np.split(a, n, axis=axis)
    else:
        sizes = _ints(sections_or_sizes, "sizes")
        if _b.sum(sizes) != a.shape[axis] or _b.min(sizes) < 0:
            raise ValueError(f"split: sizes {sizes} do not add up to extent {a.shape[axis]}")
        parts = _np.split(a, _np.cumsum(sizes)[:-1], axis=axis)
    return tuple(_like(p, t) for p in parts)


def _joined(tensors):
    ts = [_tensor(v) for v in tensors]
    dt = ts[0].svm_dtype
    for t in ts[1:]:
        dt = _promote(dt, t.svm_dtype)
    return [_compute(t, dt) for t in ts], dt


def concat(tensors, axis=0):
    vals, dt = _joined(tensors)
    return _wrap(_np.concatenate(vals, axis=axis), dt)


def stack(tensors, axis=0):
    vals, dt = _joined(tensors)
    return _wrap(_np.stack(vals, axis=axis), dt)


def gather(x, indices, axis=0):
    """numpy take along axis (negative indices wrap); an int scalar index drops the axis."""
    t = _tensor(x)
    idx = int(indices) if isinstance(indices, (int, _np.integer)) else _np.asarray(indices)
    return _like(_np.take(_np.asarray(t), idx, axis=axis), t)


def broadcast_to(x, shape):
    t = _tensor(x)
    return _like(_np.broadcast_to(_np.asarray(t), _ints(shape)), t)


def pad(x, pads, value=0.0, mode=0):
    """Padding; pads numpy-style ((before, after), ...) per axis; mode 0 = constant, 1 = reflect, 2 = edge."""
    t = _tensor(x)
    widths = [tuple(_ints(p, "pads")) for p in pads] if pads and isinstance(pads[0], (tuple, list)) else None
    if widths is None:
        flat = _ints(pads, "pads")
        widths = [tuple(flat[i:i + 2]) for i in range(0, len(flat), 2)]
    if len(widths) != t.ndim or _b.any(len(w) != 2 for w in widths):
        raise ValueError(f"pad: pads {pads} must give (before, after) for each of the {t.ndim} axes")
    if mode in (1, 2):
        if _b.any(b < 0 or a < 0 for b, a in widths):
            raise ValueError(f"pad: negative pads {pads} with mode {mode}")
        return _like(_np.pad(_np.asarray(t), widths, mode="reflect" if mode == 1 else "edge"), t)
    if mode != 0:
        raise ValueError(f"unknown pad mode {mode}")
    dt = t.svm_dtype
    fill = _np.asarray(_wrap(_np.asarray(float(value)), dt))
    return _like(_np.pad(_np.asarray(t), widths, constant_values=fill), t)


def identity(x):
    """x itself (an optimization anchor in ShapeVM)."""
    return _tensor(x)


def contiguous(x):
    t = _tensor(x)
    return _like(_np.ascontiguousarray(_np.asarray(t)), t)


# ---------------------------------------------------------------------------------------------
# reductions and normalizations

def _reduce(x, axis, keepdims, fn, name):
    t = _tensor(x)
    dt = t.svm_dtype
    ax = _axes(axis)
    if t.ndim == 0:
        ax = None  # a 0-d tensor reduces over "its" axis 0 / -1
    if name == "sum" and not dt.is_float:
        out_dt, vals = int64, _np.asarray(t).astype(_np.int64)
    elif name == "mean" and not dt.is_float:
        out_dt, vals = float32, _np.asarray(t).astype(_np.float64)
    else:
        out_dt, vals = dt, _compute(t, dt)
    if name in ("max", "min") and vals.size == 0:
        raise ValueError(f"{name}: empty reduction")
    return _wrap(fn(vals, axis=ax, keepdims=_b.bool(keepdims)), out_dt)


def sum(x, axis=None, keepdims=False): return _reduce(x, axis, keepdims, _np.sum, "sum")  # noqa: A001
def mean(x, axis=None, keepdims=False): return _reduce(x, axis, keepdims, _np.mean, "mean")
def max(x, axis=None, keepdims=False): return _reduce(x, axis, keepdims, _np.max, "max")  # noqa: A001
def min(x, axis=None, keepdims=False): return _reduce(x, axis, keepdims, _np.min, "min")  # noqa: A001


def argmax(x, axis=0, keepdims=False):
    """int64 index of the first maximum along axis (NaN counts as the maximum, like numpy)."""
    t = _tensor(x)
    v = _np.asarray(t)
    if v.ndim == 0:
        return _wrap(_np.asarray(0), int64)
    return _wrap(_np.argmax(v, axis=axis, keepdims=_b.bool(keepdims)), int64)


def _float_only(t, name):
    if not t.svm_dtype.is_float:
        raise TypeError(f"{name} needs a floating tensor, got {t.svm_dtype}")


def softmax(x, axis=-1):
    t = _tensor(x)
    _float_only(t, "softmax")
    v = _compute(t, t.svm_dtype)
    z = _np.exp(v - _np.max(v, axis=axis, keepdims=True))
    return _wrap(z / z.sum(axis=axis, keepdims=True), t.svm_dtype)


def log_softmax(x, axis=-1):
    t = _tensor(x)
    _float_only(t, "log_softmax")
    v = _compute(t, t.svm_dtype)
    z = v - _np.max(v, axis=axis, keepdims=True)
    return _wrap(z - _np.log(_np.exp(z).sum(axis=axis, keepdims=True)), t.svm_dtype)


def layer_norm(x, weight=None, bias=None, eps=1e-5, axis=-1):
    """Normalize over axes [axis, rank), then * weight + bias (either may be None)."""
    t = _tensor(x)
    _float_only(t, "layer_norm")
    v = _compute(t, t.svm_dtype)
    axes = tuple(range(axis % v.ndim, v.ndim))
    m = v.mean(axis=axes, keepdims=True)
    var = ((v - m) ** 2).mean(axis=axes, keepdims=True)
    y = (v - m) / _np.sqrt(var + eps)
    if weight is not None:
        y = y * _compute(_tensor(weight), _tensor(weight).svm_dtype)
    if bias is not None:
        y = y + _compute(_tensor(bias), _tensor(bias).svm_dtype)
    return _wrap(y, t.svm_dtype)


# ---------------------------------------------------------------------------------------------
# convolution family (NC[D]HW; see the ops.def rows for the attribute encodings)

def _per_axis(values, n, fallback, what):
    if values is None or len(values) == 0:
        return [fallback] * n
    values = _ints(values, what)
    if len(values) != n:
        raise ValueError(f"{what} {values} needs {n} entries")
    return values


def _pads_of(pads, n):
    if pads is None or len(pads) == 0:
        return [0] * n, [0] * n
    pads = _ints(pads, "pads")
    if _b.any(p < 0 for p in pads):
        raise ValueError(f"negative pads {pads}")
    if len(pads) == n:
        return list(pads), list(pads)
    if len(pads) == 2 * n:
        return list(pads[0::2]), list(pads[1::2])
    raise ValueError(f"pads {pads} needs {n} or {2 * n} entries")


def _windows(in_sizes, kernel, strides, pads, dilations, auto_pad, ceil_mode=False):
    """Per spatial axis (out, pad_before, pad_after, kernel, stride, dilation) as ONNX defines them."""
    n = len(in_sizes)
    strides = _per_axis(strides, n, 1, "strides")
    dilations = _per_axis(dilations, n, 1, "dilations")
    before, after = _pads_of(pads, n)
    if auto_pad not in (0, 1, 2, 3):
        raise ValueError(f"unknown auto_pad {auto_pad}")
    out = []
    for i, k, s, d, pb, pa in zip(in_sizes, kernel, strides, dilations, before, after):
        eff = d * (k - 1) + 1
        if auto_pad in (1, 2):
            o = -(-i // s)
            total = _b.max(0, (o - 1) * s + eff - i)
            pb = total // 2 if auto_pad == 1 else total - total // 2
            out.append((o, pb, total - pb, k, s, d))
            continue
        if auto_pad == 3:
            pb = pa = 0
        span = i + pb + pa - eff
        if span < 0:
            raise ValueError(f"kernel {kernel} larger than the padded input {in_sizes}")
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + pb:
            o -= 1
        out.append((o, pb, pa, k, s, d))
    return out


def _taps(windows):
    """For every kernel tap, the slices of the padded input its outputs read."""
    import itertools
    for tap in itertools.product(*[range(w[3]) for w in windows]):
        yield tap, tuple(slice(t * w[5], t * w[5] + w[4] * (w[0] - 1) + 1, w[4]) for t, w in zip(tap, windows))


def _padded(v, windows, fill):
    """v with each spatial axis padded by its window's pads, plus room for ceil_mode's last window."""
    widths = [(0, 0), (0, 0)]
    for size, w in zip(v.shape[2:], windows):
        need = (w[0] - 1) * w[4] + w[5] * (w[3] - 1) + 1
        widths.append((w[1], _b.max(w[2], need - size - w[1])))
    return _np.pad(v, widths, constant_values=fill), widths


def conv(x, w, b=None, strides=None, pads=None, dilations=None, groups=1, auto_pad=0):
    """N-D convolution (cross-correlation) of x [N,C,...] with w [M,C/groups,k...] plus bias b [M]."""
    t = _tensor(x)
    _float_only(t, "conv")
    v, wv = _compute(t, t.svm_dtype), _compute(_tensor(w), t.svm_dtype)
    if v.ndim != wv.ndim or v.shape[1] != wv.shape[1] * groups or wv.shape[0] % groups:
        raise ValueError(f"conv: input {v.shape} does not match weight {wv.shape} with groups {groups}")
    windows = _windows(v.shape[2:], wv.shape[2:], strides, pads, dilations, auto_pad)
    vp, _ = _padded(v, windows, 0.0)
    n, c = v.shape[:2]
    m = wv.shape[0]
    out = _np.zeros((n, groups, m // groups) + tuple(win[0] for win in windows))
    wg = wv.reshape((groups, m // groups, c // groups) + wv.shape[2:])
    for tap, sl in _taps(windows):
        patch = vp[(slice(None), slice(None)) + sl].reshape((n, groups, c // groups) + out.shape[3:])
        out += _np.einsum("ngc...,gmc->ngm...", patch, wg[(Ellipsis,) + tap])
    out = out.reshape((n, m) + out.shape[3:])
    if b is not None:
        out += _compute(_tensor(b), t.svm_dtype).reshape((1, m) + (1,) * len(windows))
    return _wrap(out, t.svm_dtype)


def conv_transpose(x, w, b=None, strides=None, pads=None, dilations=None, groups=1, auto_pad=0,
                   output_padding=None, output_shape=None):
    """Transposed convolution of x [N,C,...] with w [C,M/groups,k...] plus bias b [M]."""
    t = _tensor(x)
    _float_only(t, "conv_transpose")
    v, wv = _compute(t, t.svm_dtype), _compute(_tensor(w), t.svm_dtype)
    if v.ndim != wv.ndim or v.shape[1] != wv.shape[0] or v.shape[1] % groups:
        raise ValueError(f"conv_transpose: input {v.shape} does not match weight {wv.shape} with groups {groups}")
    nsp = v.ndim - 2
    strides = _per_axis(strides, nsp, 1, "strides")
    dilations = _per_axis(dilations, nsp, 1, "dilations")
    extra = _per_axis(output_padding, nsp, 0, "output_padding")
    before, after = _pads_of(pads, nsp)
    full = [s * (i - 1) + d * (k - 1) + 1 + e for i, k, s, d, e in zip(v.shape[2:], wv.shape[2:], strides, dilations, extra)]
    if (output_shape is not None and len(output_shape)) or auto_pad in (1, 2):
        targets = list(output_shape) if output_shape is not None and len(output_shape) else [i * s for i, s in zip(v.shape[2:], strides)]
        before, after = [], []
        for f, o in zip(full, targets):
            total = f - o
            pb = total // 2 if auto_pad == 1 else total - total // 2  # floor division, as ONNX's reference
            before.append(pb)
            after.append(total - pb)
    elif auto_pad == 3:
        before, after = [0] * nsp, [0] * nsp
    n, c = v.shape[:2]
    mg = wv.shape[1]
    result = _np.zeros((n, groups, mg) + tuple(full))
    vg = v.reshape((n, groups, c // groups) + v.shape[2:])
    wg = wv.reshape((groups, c // groups, mg) + wv.shape[2:])
    import itertools
    for tap in itertools.product(*[range(k) for k in wv.shape[2:]]):
        sl = tuple(slice(t * d, t * d + s * (i - 1) + 1, s) for t, d, s, i in zip(tap, dilations, strides, v.shape[2:]))
        result[(slice(None), slice(None), slice(None)) + sl] += _np.einsum("ngc...,gcm->ngm...", vg, wg[(Ellipsis,) + tap])
    result = result.reshape((n, groups * mg) + tuple(full))
    grow = [(0, 0), (0, 0)] + [(_b.max(0, -pb), _b.max(0, -pa)) for pb, pa in zip(before, after)]
    result = _np.pad(result, grow)  # negative pads (output_shape past the full extent) add zeros
    crop = tuple(slice(pb + g[0], f + g[0] - pa) for pb, pa, f, g in zip(before, after, full, grow[2:]))
    out = result[(slice(None), slice(None)) + crop]
    if b is not None:
        out = out + _compute(_tensor(b), t.svm_dtype).reshape((1, groups * mg) + (1,) * nsp)
    return _wrap(out, t.svm_dtype)


def _pool_input(x, name, kernel, strides, pads, dilations, auto_pad, ceil_mode, fill):
    """(tensor, float64 values, windows, values padded with `fill`, pad widths) of a pool's input."""
    t = _tensor(x)
    _float_only(t, name)
    v = _compute(t, t.svm_dtype)
    windows = _windows(v.shape[2:], _ints(kernel, "kernel"), strides, pads, dilations, auto_pad, ceil_mode)
    vp, widths = _padded(v, windows, fill)
    return t, v, windows, vp, widths


def max_pool(x, kernel, strides=None, pads=None, dilations=None, ceil_mode=False, auto_pad=0):
    """Max over each window; padding never wins."""
    t, v, windows, vp, _ = _pool_input(x, "max_pool", kernel, strides, pads, dilations, auto_pad, ceil_mode, -_np.inf)
    out = _np.full(v.shape[:2] + tuple(w[0] for w in windows), -_np.inf)
    for _, sl in _taps(windows):
        out = _np.fmax(out, vp[(slice(None), slice(None)) + sl])
    return _wrap(out, t.svm_dtype)


def avg_pool(x, kernel, strides=None, pads=None, ceil_mode=False, count_include_pad=False, auto_pad=0):
    """Mean over each window; the divisor counts pads only with count_include_pad."""
    t, v, windows, vp, widths = _pool_input(x, "avg_pool", kernel, strides, pads, None, auto_pad, ceil_mode, 0.0)
    ones = _np.ones((1, 1) + v.shape[2:])
    if count_include_pad:  # pads count, the room past them (ceil_mode) does not
        inner = [(0, 0), (0, 0)] + [(w[1], w[2]) for w in windows]
        ones = _np.pad(ones, inner, constant_values=1.0)
        outer = [(0, 0), (0, 0)] + [(0, wd[1] - w[2]) for wd, w in zip(widths[2:], windows)]
        ones = _np.pad(ones, outer, constant_values=0.0)
    else:
        ones = _np.pad(ones, widths, constant_values=0.0)
    total = _np.zeros(v.shape[:2] + tuple(w[0] for w in windows))
    count = _np.zeros((1, 1) + total.shape[2:])
    for _, sl in _taps(windows):
        total += vp[(slice(None), slice(None)) + sl]
        count += ones[(slice(None), slice(None)) + sl]
    return _wrap(total / count, t.svm_dtype)


def _global_pool(x, fn, name):
    t = _tensor(x)
    _float_only(t, name)
    v = _compute(t, t.svm_dtype)
    return _wrap(fn(v, axis=tuple(range(2, v.ndim)), keepdims=True), t.svm_dtype)


def global_avg_pool(x):
    return _global_pool(x, _np.mean, "global_avg_pool")


def global_max_pool(x):
    return _global_pool(x, _np.max, "global_max_pool")


def _per_channel(p, t, ndim):
    return _compute(_tensor(p), t.svm_dtype).reshape((1, -1) + (1,) * (ndim - 2))


def batch_norm(x, scale, bias, mean, var, eps=1e-05):
    """Inference batch normalization over axis 1."""
    t = _tensor(x)
    _float_only(t, "batch_norm")
    v = _compute(t, t.svm_dtype)
    y = (v - _per_channel(mean, t, v.ndim)) / _np.sqrt(_per_channel(var, t, v.ndim) + eps)
    return _wrap(y * _per_channel(scale, t, v.ndim) + _per_channel(bias, t, v.ndim), t.svm_dtype)


def group_norm(x, scale=None, bias=None, groups=1, eps=1e-05):
    """Normalize each sample's channel groups, then * scale + bias per channel."""
    t = _tensor(x)
    _float_only(t, "group_norm")
    v = _compute(t, t.svm_dtype)
    g = v.reshape((v.shape[0], groups, -1))
    m = g.mean(axis=2, keepdims=True)
    y = ((g - m) / _np.sqrt(((g - m) ** 2).mean(axis=2, keepdims=True) + eps)).reshape(v.shape)
    if scale is not None:
        y = y * _per_channel(scale, t, v.ndim)
    if bias is not None:
        y = y + _per_channel(bias, t, v.ndim)
    return _wrap(y, t.svm_dtype)


def instance_norm(x, scale, bias, eps=1e-05):
    """Normalize each (sample, channel) over its spatial axes, then * scale + bias."""
    t = _tensor(x)
    return group_norm(t, scale, bias, groups=t.shape[1], eps=eps)


def _resize_matrix(n_in, n_out, scale, resized, mode, coord, nearest, a, exclude):
    m = _np.zeros((n_out, n_in))
    for o in range(n_out):
        if coord == 0:
            src = (o + 0.5) / scale - 0.5
        elif coord == 1:
            src = o / scale
        elif coord == 2:  # the unrounded resized length (n_in * scale for scales), as ONNX's reference
            src = 0.0 if resized == 1 else o * (n_in - 1) / (resized - 1)
        elif coord == 3:
            src = (o + 0.5) / scale - 0.5 if resized > 1 else 0.0
        elif coord == 4:
            src = (o + 0.5) / scale
        else:
            raise ValueError(f"unknown coordinate_mode {coord}")
        if mode == 0:
            if nearest == 0:
                i = _math.ceil(src - 0.5)
            elif nearest == 1:
                i = _math.floor(src + 0.5)
            elif nearest == 2:
                i = _math.floor(src)
            else:
                i = _math.ceil(src)
            m[o, _b.min(_b.max(i, 0), n_in - 1)] = 1.0
            continue
        base = _math.floor(src)
        frac = src - base
        if mode == 1:
            taps = [(base, 1.0 - frac), (base + 1, frac)]
        else:
            def cubic(d):
                d = _b.abs(d)
                if d <= 1:
                    return ((a + 2) * d - (a + 3)) * d * d + 1
                return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a if d < 2 else 0.0
            taps = [(base + k - 1, cubic(frac - (k - 1))) for k in range(4)]
        if exclude:
            taps = [(i, wt if 0 <= i < n_in else 0.0) for i, wt in taps]
            total = _b.sum(wt for _, wt in taps)
            taps = [(i, wt / total) for i, wt in taps]
        for i, wt in taps:
            m[o, _b.min(_b.max(i, 0), n_in - 1)] += wt
    return m


def resize(x, sizes=None, scales=None, mode=0, coordinate_mode=0, nearest_mode=0, cubic_coeff_a=-0.75,
           exclude_outside=False):
    """Resample to sizes or by scales (all axes, or the spatial ones); see the ops.def row for the modes."""
    t = _tensor(x)
    _float_only(t, "resize")
    v = _compute(t, t.svm_dtype)
    given = [float(e) for e in (_ints(sizes, "sizes") if sizes is not None else _np.asarray(scales).reshape(-1))]
    lead = v.ndim - len(given)
    if lead not in (0, 2):
        raise ValueError(f"resize: {len(given)} sizes/scales for rank {v.ndim}")
    for axis in range(lead, v.ndim):
        n_in = v.shape[axis]
        g = given[axis - lead]
        n_out, scale, resized = (int(g), g / n_in, g) if sizes is not None else (int(_math.floor(n_in * g)), g, n_in * g)
        if n_out == n_in and scale == 1.0:
            continue
        m = _resize_matrix(n_in, n_out, scale, resized, mode, coordinate_mode, nearest_mode, cubic_coeff_a,
                           exclude_outside)
        v = _np.moveaxis(_np.tensordot(m, _np.moveaxis(v, axis, 0), axes=1), 0, axis)
    return _wrap(v, t.svm_dtype)


def depth_to_space(x, blocksize, mode=0):
    """[N,C*b*b,H,W] -> [N,C,H*b,W*b]; mode 0 = DCR, 1 = CRD (ONNX DepthToSpace)."""
    t = _tensor(x)
    v = _np.asarray(t)
    n, c, h, w = v.shape
    b = blocksize
    if mode == 0:
        y = v.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = v.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _like(_np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b)), t)


def space_to_depth(x, blocksize):
    """[N,C,H*b,W*b] -> [N,C*b*b,H,W] (ONNX SpaceToDepth)."""
    t = _tensor(x)
    v = _np.asarray(t)
    n, c, h, w = v.shape
    b = blocksize
    y = v.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return _like(_np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b)), t)


# ---------------------------------------------------------------------------------------------
# creation

def _number(v):
    """A `num` operand as a Python int (exact) or float."""
    if isinstance(v, _np.ndarray):
        v = v.reshape(()).item()
    if isinstance(v, (_b.bool, _np.bool_)):
        return int(v)
    return v


def _filled(shape, value, dtype):
    dt = _dtype_of(dtype)
    value = _number(value)
    if isinstance(value, (int, _np.integer)) and not dt.is_float:
        arr = _np.full(_ints(shape), int(value), dtype=_np.int64)
    else:
        arr = _np.full(_ints(shape), float(value), dtype=_np.float64)
    if _b.min(_ints(shape), default=0) < 0:
        raise ValueError(f"negative extent in shape {shape}")
    return _wrap(arr, dt)


def zeros(shape, dtype=float32): return _filled(shape, 0, dtype)
def ones(shape, dtype=float32): return _filled(shape, 1, dtype)
def full(shape, value, dtype=float32): return _filled(shape, value, dtype)


def arange(start, stop=None, step=None, dtype=None):
    """numpy arange(stop) / arange(start, stop[, step]); without dtype: int64 (ops.def), or
    float64 when an argument is a float (as the frontend binds ops.arange)."""
    if dtype is None:
        floats = any(isinstance(v, (float, _np.floating)) for v in (start, stop, step))
        dtype = float64 if floats else int64
    dt = _dtype_of(dtype)
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    start, stop, step = _number(start), _number(stop), _number(step)
    if step == 0:
        raise ValueError("arange: step must not be zero")
    exact = all(isinstance(v, (int, _np.integer)) for v in (start, stop, step)) and not dt.is_float
    if exact:
        return _wrap(_np.arange(start, stop, step, dtype=_np.int64), dt)
    count = _b.max(0, _math.ceil((stop - start) / step))
    return _wrap(float(start) + _np.arange(count, dtype=_np.float64) * float(step), dt)


class _MT19937_64:
    """std::mt19937_64, as specified by the C++ standard (so ShapeVM's randn is reproducible here)."""
    _MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.mt = [seed & self._MASK]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self._MASK)
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self._MASK


def randn(shape, seed=0, dtype=float32):
    """Standard normal samples exactly as ShapeVM draws them (creation_ops.cc): pairs of 53-bit
    uniforms u1 in (0, 1], u2 in [0, 1) from mt19937_64(seed) give r cos(2 pi u2), r sin(2 pi u2)."""
    dt = _dtype_of(dtype)
    if not dt.is_float:
        raise TypeError(f"randn: dtype must be a float dtype, got {dt.name}")
    dims = _ints(shape)
    count = int(_np.prod(dims, dtype=_np.int64)) if dims else 1
    gen = _MT19937_64(int(seed))
    two_pi, unit = 6.283185307179586476925, 1.0 / 9007199254740992.0
    out = _np.empty(count, dtype=_np.float64)
    for i in range(0, count, 2):
        u1 = float((gen() >> 11) + 1) * unit
        u2 = float(gen() >> 11) * unit
        radius = _math.sqrt(-2.0 * _math.log(u1))
        out[i] = radius * _math.cos(two_pi * u2)
        if i + 1 < count:
            out[i + 1] = radius * _math.sin(two_pi * u2)
    return _wrap(out.reshape(dims), dt)
