// SPDX-License-Identifier: Apache-2.0
// ONNX TensorProto <-> ShapeVM Tensor: dtype mapping and reading a tensor's data (raw, typed
// fields or an external-data file relative to the model's folder). Invariant: the declared size
// is checked against the max_tensor_bytes tunable before anything is allocated or read.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shapevm/dtype.h"
#include "shapevm/status.h"
#include "shapevm/tensor.h"

namespace onnx {
class TensorProto;
}

namespace shapevm {

// The ShapeVM dtype of an ONNX TensorProto data type; nullopt for the ones ShapeVM lacks.
std::optional<DType> dtypeFromOnnx(int data_type);
// "FLOAT", "INT64", ... (or "type N").
std::string onnxTypeName(int data_type);
// ONNX's TensorProto data type for a ShapeVM dtype.
int onnxTypeOf(DType dtype);

// The tensor a TensorProto holds. `base_dir` resolves external data ("" = external data is an
// error); `what` names the tensor in errors. Unsupported = a dtype ShapeVM lacks.
Expected<Tensor> tensorFromProto(const onnx::TensorProto& proto, std::string_view what,
                                 const std::string& base_dir = "");

}  // namespace shapevm
