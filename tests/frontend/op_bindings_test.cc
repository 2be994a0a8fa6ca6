// SPDX-License-Identifier: Apache-2.0
// The `ops.<name>` bindings derived from ops.def: every op but the internal slice is bound, the
// parameters are the table's inputs then attributes (axes spelled axis, a variadic input
// `tensors`) with the table's defaults, and the few Python-only quirks hold.
#include <gtest/gtest.h>

#include "frontend/frontend.h"
#include "ops/registry.h"

namespace shapevm::frontend {
namespace {

std::string signatureOf(std::string_view op) {
  auto params = opPythonParams(op);
  if (!params) return "unbound";
  std::string text;
  for (const PyParam& p : *params)
    text += (text.empty() ? "" : ", ") + p.name + (p.default_text ? "=" + *p.default_text : "");
  return text;
}

TEST(OpBindings, EveryTableOpButSliceIsBoundFromItsSchema) {
  for (const OpSchema& schema : OpRegistry::global().schemas()) {
    SCOPED_TRACE(std::string(schema.name));
    auto params = opPythonParams(schema.name);
    if (schema.id == OpId::Slice) {
      EXPECT_FALSE(params.has_value());
      continue;
    }
    ASSERT_TRUE(params.has_value());
    // The inputs come first, in table order, optional ones defaulting to None.
    ASSERT_GE(params->size(), schema.inputs.size());
    for (std::size_t i = 0; i < schema.inputs.size(); ++i) {
      const InputSpec& in = schema.inputs[i];
      EXPECT_EQ((*params)[i].name, in.variadic ? "tensors" : in.name);
      EXPECT_EQ((*params)[i].default_text.has_value(), in.optional);
    }
  }
}

TEST(OpBindings, SignaturesFollowTheTableAndTheQuirks) {
  EXPECT_EQ(signatureOf("add"), "a, b");
  EXPECT_EQ(signatureOf("sum"), "x, axis=None, keepdims=False");
  EXPECT_EQ(signatureOf("argmax"), "x, axis=0, keepdims=False");
  EXPECT_EQ(signatureOf("transpose"), "x, perm=None");
  EXPECT_EQ(signatureOf("unsqueeze"), "x, axis");
  EXPECT_EQ(signatureOf("concat"), "tensors, axis=0");
  EXPECT_EQ(signatureOf("cast"), "x, dtype");
  EXPECT_EQ(signatureOf("full"), "shape, value, dtype=float32");
  EXPECT_EQ(signatureOf("randn"), "shape, seed=0, dtype=float32");
  EXPECT_EQ(signatureOf("pad"), "x, pads, value=0.0, mode=0");
  EXPECT_EQ(signatureOf("conv"), "x, w, b=None, strides=None, pads=None, dilations=None, groups=1, auto_pad=0");
  // quirks
  EXPECT_EQ(signatureOf("layer_norm"), "x, weight=None, bias=None, eps=1e-05, axis=-1");
  EXPECT_EQ(signatureOf("split"), "x, sections_or_sizes, axis=0");
  EXPECT_EQ(signatureOf("arange"), "start, stop=None, step=None, dtype=None");
  EXPECT_EQ(signatureOf("slice"), "unbound");
}

TEST(OpBindings, DerivedDefaultsAndOrderCompile) {
  const char* source =
      "from shapevm import ops, Tensor\n"
      "def f(x: Tensor[2, 3]):\n"
      "    return ops.argmax(x), ops.layer_norm(x, None, None, 1e-3, -1)\n";
  auto module = compilePython(source, "bindings.py", FrontendOptions());
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
}

}  // namespace
}  // namespace shapevm::frontend
