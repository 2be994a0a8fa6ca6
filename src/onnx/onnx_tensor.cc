// SPDX-License-Identifier: Apache-2.0
// TensorProto reading for the importer and the conformance tests (see onnx_tensor.h).
#include "onnx/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "support/tunables.h"

namespace shapevm {
namespace {

namespace fs = std::filesystem;

// external_data entries: location (relative to the model), offset, length.
Status readExternal(const onnx::TensorProto& proto, std::string_view what, const std::string& base_dir, void* out,
                    std::size_t bytes) {
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") location = entry.value();
    else if (entry.key() == "offset") offset = std::atoll(entry.value().c_str());
    else if (entry.key() == "length") length = std::atoll(entry.value().c_str());
  }
  if (location.empty()) return makeError(ErrorCode::BadFormat, "{}: external data without a location", what);
  const fs::path relative(location);
  if (relative.is_absolute() ||
      std::any_of(relative.begin(), relative.end(), [](const fs::path& p) { return p == ".."; })) {
    return makeError(ErrorCode::BadFormat, "{}: external data location '{}' must stay inside the model's folder", what,
                     location);
  }
  if (base_dir.empty())
    return makeError(ErrorCode::Unsupported, "{}: external data (location '{}') needs a model file", what, location);
  const fs::path path = fs::path(base_dir) / relative;
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "{}: cannot open external-data file '{}'", what, path.string());
  if (length >= 0 && static_cast<std::size_t>(length) != bytes) {
    return makeError(ErrorCode::BadFormat, "{}: external data length {} but the shape needs {} bytes", what, length,
                     bytes);
  }
  in.seekg(offset);
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  if (!in || static_cast<std::size_t>(in.gcount()) != bytes) {
    return makeError(ErrorCode::BadFormat, "{}: external-data file '{}' is shorter than offset {} + {} bytes", what,
                     path.string(), offset, bytes);
  }
  return Status::ok();
}

}  // namespace

std::optional<DType> dtypeFromOnnx(int data_type) {
  switch (data_type) {
    case onnx::TensorProto_DataType_FLOAT: return DType::Float32;
    case onnx::TensorProto_DataType_DOUBLE: return DType::Float64;
    case onnx::TensorProto_DataType_FLOAT16: return DType::Float16;
    case onnx::TensorProto_DataType_BFLOAT16: return DType::BFloat16;
    case onnx::TensorProto_DataType_INT32: return DType::Int32;
    case onnx::TensorProto_DataType_INT64: return DType::Int64;
    case onnx::TensorProto_DataType_BOOL: return DType::Bool;
    default: return std::nullopt;
  }
}

int onnxTypeOf(DType dtype) {
  for (int t = 0; t <= onnx::TensorProto_DataType_DataType_MAX; ++t) {
    if (dtypeFromOnnx(t) == dtype) return t;
  }
  return onnx::TensorProto_DataType_UNDEFINED;
}

std::string onnxTypeName(int data_type) {
  const std::string& name = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(data_type));
  return name.empty() ? fmt::format("type {}", data_type) : name;
}

Expected<Tensor> tensorFromProto(const onnx::TensorProto& proto, std::string_view what, const std::string& base_dir) {
  std::optional<DType> dtype = dtypeFromOnnx(proto.data_type());
  if (!dtype) return makeError(ErrorCode::Unsupported, "dtype {} ({})", onnxTypeName(proto.data_type()), what);
  std::vector<std::int64_t> dims(proto.dims().begin(), proto.dims().end());
  // The declared size, checked before allocating (a hostile file may declare anything).
  const auto limit = static_cast<double>(Tunables::get(Tunable::MaxTensorBytes));
  double declared = static_cast<double>(dtypeSize(*dtype));
  for (std::int64_t d : dims) {
    if (d < 0) return makeError(ErrorCode::BadFormat, "{}: negative dim {}", what, d);
    declared *= static_cast<double>(d);
  }
  if (declared > limit) {
    return makeError(ErrorCode::OutOfMemory, "{}: {} bytes exceeds the limit of {} bytes (tunable max_tensor_bytes)",
                     what, declared, static_cast<std::int64_t>(limit));
  }
  SVM_ASSIGN_OR_RETURN(Shape shape, Shape::from(dims));
  SVM_ASSIGN_OR_RETURN(Tensor tensor, Tensor::empty(*dtype, shape));
  const auto count = static_cast<std::size_t>(tensor.numel());
  const std::size_t item = tensor.itemSize();
  auto mismatch = [&](std::size_t got) {
    return makeError(ErrorCode::BadFormat, "{}: {} values for shape {}", what, got, shape.toString());
  };
  auto normalizeBools = [&] {
    if (*dtype != DType::Bool) return;
    auto* bytes = static_cast<std::uint8_t*>(tensor.rawData());
    for (std::size_t i = 0; i < count; ++i) bytes[i] = bytes[i] ? 1 : 0;
  };
  if (proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    if (count) SVM_RETURN_IF_ERROR(readExternal(proto, what, base_dir, tensor.rawData(), count * item));
    normalizeBools();
    return tensor;
  }
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    if (raw.size() != count * item) return mismatch(raw.size() / item);
    if (count) std::memcpy(tensor.rawData(), raw.data(), raw.size());
    normalizeBools();
    return tensor;
  }
  switch (*dtype) {
    case DType::Float32:
      if (static_cast<std::size_t>(proto.float_data_size()) != count) return mismatch(proto.float_data_size());
      std::copy(proto.float_data().begin(), proto.float_data().end(), tensor.data<float>());
      break;
    case DType::Float64:
      if (static_cast<std::size_t>(proto.double_data_size()) != count) return mismatch(proto.double_data_size());
      std::copy(proto.double_data().begin(), proto.double_data().end(), tensor.data<double>());
      break;
    case DType::Int64:
      if (static_cast<std::size_t>(proto.int64_data_size()) != count) return mismatch(proto.int64_data_size());
      std::copy(proto.int64_data().begin(), proto.int64_data().end(), tensor.data<std::int64_t>());
      break;
    case DType::Int32:
    case DType::Bool:
    case DType::Float16:
    case DType::BFloat16:  // int32_data holds the values (16-bit patterns for the half types)
      if (static_cast<std::size_t>(proto.int32_data_size()) != count) return mismatch(proto.int32_data_size());
      for (std::size_t i = 0; i < count; ++i) {
        const std::int32_t v = proto.int32_data(static_cast<int>(i));
        if (*dtype == DType::Int32) tensor.data<std::int32_t>()[i] = v;
        else if (*dtype == DType::Bool) tensor.data<bool>()[i] = v != 0;
        else tensor.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(v);
      }
      break;
  }
  return tensor;
}

}  // namespace shapevm
