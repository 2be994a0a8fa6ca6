# SPDX-License-Identifier: Apache-2.0
# Hand-built ONNX graphs (onnx.helper) of the chains exporters write for LayerNorm and exact GELU,
# the import-time pattern recognition's test inputs (test_onnx_patterns.py) and fuzz seeds.
# Each builder takes knobs that break the pattern (another consumer, a wrong constant) so the
# tests can check that only exact matches are replaced.
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 14


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.float32), name))


def layer_norm_model(dim=8, eps=1e-5, exponent=2.0, affine=True, expose_mean=False):
    """x -> ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul w/Add b] -> y (as torch exports
    nn.LayerNorm at opset 14). expose_mean also makes the mean a graph output."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        const("two", exponent),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        const("eps", eps),
        helper.make_node("Add", ["var", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["norm" if affine else "y"]),
    ]
    inits = []
    if affine:
        nodes += [helper.make_node("Mul", ["norm", "w"], ["scaled"]), helper.make_node("Add", ["scaled", "b"], ["y"])]
        inits = [numpy_helper.from_array(rng.standard_normal(dim).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal(dim).astype(np.float32), "b")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", dim])]
    if expose_mean:
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["batch", "seq", 1]))
    graph = helper.make_graph(nodes, "layer_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  ["batch", "seq", dim])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def gelu_model(dim=8, form="torch", sqrt2=2 ** 0.5, half=0.5, expose_erf=False):
    """y = gelu(x) as x * (1 + erf(x / sqrt2)) * 0.5 ("torch", what torch exports), (x * 0.5) *
    (1 + erf(x * (1/sqrt2))) ("half_first") or ((1 + erf(x / sqrt2)) * 0.5) * x ("phi_half")."""
    nodes = [const("c_sqrt2", sqrt2 if form != "half_first" else 1 / sqrt2), const("one", 1.0), const("half", half)]
    if form == "half_first":
        nodes.append(helper.make_node("Mul", ["x", "c_sqrt2"], ["scaled"]))
    else:
        nodes.append(helper.make_node("Div", ["x", "c_sqrt2"], ["scaled"]))
    nodes += [helper.make_node("Erf", ["scaled"], ["erf"]), helper.make_node("Add", ["erf", "one"], ["phi"])]
    if form == "torch":
        nodes += [helper.make_node("Mul", ["x", "phi"], ["xphi"]), helper.make_node("Mul", ["xphi", "half"], ["y"])]
    elif form == "half_first":
        nodes += [helper.make_node("Mul", ["x", "half"], ["xh"]), helper.make_node("Mul", ["xh", "phi"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["phi", "half"], ["ph"]), helper.make_node("Mul", ["ph", "x"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", dim])]
    if expose_erf:
        outputs.append(helper.make_tensor_value_info("erf", TensorProto.FLOAT, ["batch", dim]))
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", dim])],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
