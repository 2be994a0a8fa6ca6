// SPDX-License-Identifier: Apache-2.0
// ONNX backend node tests through the ONNX importer: every single-node case folder whose op the
// importer maps (onnxOpSupported, the importer's own table: no second ONNX-op table here) becomes
// one test case that imports model.onnx, runs it in a Session at O0 and compares every output with
// the ONNX runner's tolerance for floats, exact for ints and bools; dtype and shape must match. A
// case the importer refuses (a dtype ShapeVM lacks, an opset outside 11..17, ...) is skipped with
// its reason, never passed. Inputs that play the role of attributes (axes, pads, k, ...) are graph
// inputs in these tests; when the importer needs them at import, the case is imported a second
// time with those inputs bound as initializers from the data set (what exporters write) and is
// counted apart. The cases come from the build tree (generate_onnx_node_data.py regenerates them
// from python3-onnx's generators); an optional extra folder (SHAPEVM_EXTRA_ONNX_NODE_DIR, by
// default ../shared/conformance/onnx-node) adds the cases the generators do not produce.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "onnx/onnx_import.h"
#include "onnx/onnx_tensor.h"
#include "shapevm/shapevm.h"

namespace shapevm {
namespace {

namespace fs = std::filesystem;

const fs::path kGeneratedRoot = fs::path(SHAPEVM_ONNX_NODE_DIR);
const fs::path kExtraRoot = fs::path(SHAPEVM_EXTRA_ONNX_NODE_DIR);  // optional; empty = none
constexpr double kRelativeTolerance = 1e-3;
constexpr double kAbsoluteTolerance = 1e-5;
constexpr int kMinimumMappedCases = 300;
constexpr int kMinimumImportedPasses = 320;  // SupportedOpsPass: 327 of 387 pass today

// ---- Loading ONNX protos ----

template <typename Proto>
Status loadProto(const fs::path& path, Proto& proto) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::IoError, "cannot open {}", path.string());
  if (!proto.ParseFromIstream(&in)) return makeError(ErrorCode::BadFormat, "cannot parse {}", path.string());
  return Status::ok();
}

// ---- Discovery ----

struct NodeCase {
  std::string folder;   // "test_add_bcast"
  std::string op_type;  // "Add"
  fs::path root;        // kGeneratedRoot or kExtraRoot
};
void PrintTo(const NodeCase& c, std::ostream* os) { *os << c.folder << " (" << c.op_type << ")"; }

const std::vector<NodeCase>& discoveredCases() {
  static const auto* cases = [] {
    auto* out = new std::vector<NodeCase>();
    // Folder name -> path; a generated case wins over an extra one of the same name.
    std::map<std::string, fs::path> folders;
    for (const fs::path& root : {kGeneratedRoot, kExtraRoot}) {
      std::error_code error;
      if (root.empty() || !fs::is_directory(root, error)) continue;
      for (const auto& entry : fs::directory_iterator(root, error)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_directory() && name.find("_expanded") == std::string::npos) folders.emplace(name, entry.path());
      }
    }
    for (const auto& [name, folder] : folders) {
      onnx::ModelProto model;
      if (!loadProto(folder / "model.onnx", model).isOk()) continue;
      if (model.graph().node_size() != 1) continue;
      const onnx::NodeProto& node = model.graph().node(0);
      if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
      if (!onnxOpSupported(node.op_type())) continue;
      out->push_back({name, node.op_type(), folder.parent_path()});
    }
    return out;
  }();
  return *cases;
}

// ---- Comparison ----

Status compareTensors(const Tensor& actual, const Tensor& expected, std::string_view label) {
  if (actual.dtype() != expected.dtype()) {
    return makeError(ErrorCode::DTypeMismatch, "{}: dtype {} but ONNX expects {}", label, dtypeName(actual.dtype()),
                     dtypeName(expected.dtype()));
  }
  if (actual.shape() != expected.shape()) {
    return makeError(ErrorCode::ShapeMismatch, "{}: shape {} but ONNX expects {}", label, actual.shape().toString(),
                     expected.shape().toString());
  }
  const bool floating = isFloating(expected.dtype());
  // bfloat16 carries 8 significant bits; float16 11.
  const double rtol = expected.dtype() == DType::BFloat16  ? 1.0 / 128
                      : expected.dtype() == DType::Float16 ? 2e-3
                                                           : kRelativeTolerance;
  std::int64_t bad = 0;
  std::string first;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.elementAsDouble(i), e = expected.elementAsDouble(i);
    bool ok;
    if (!floating) ok = a == e;
    else if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else ok = std::abs(a - e) <= kAbsoluteTolerance + rtol * std::abs(e);
    if (!ok && bad++ == 0) first = fmt::format("element {} is {} but ONNX expects {}", i, a, e);
  }
  if (bad) {
    return makeError(ErrorCode::AssertionFailed, "{}: {} of {} elements differ; first: {}", label, bad,
                     expected.numel(), first);
  }
  return Status::ok();
}

// ---- One case through the importer and a Session ----

struct ImportOutcome {
  bool passed = false;
  bool bound = false;   // passed with attribute-like inputs bound as initializers
  std::string skip;     // non-empty: skipped, with the reason
  std::string failure;  // non-empty: failed
};

ImportOutcome skipped(std::string reason) {
  ImportOutcome o;
  o.skip = std::move(reason);
  return o;
}
ImportOutcome failed(std::string why) {
  ImportOutcome o;
  o.failure = std::move(why);
  return o;
}

// The importer's Unsupported message without the path and node name.
std::string reasonOf(const Status& s) {
  std::string reason = s.message();
  if (const std::size_t model = reason.find(".onnx: "); model != std::string::npos) reason = reason.substr(model + 7);
  if (!reason.empty() && std::isdigit(static_cast<unsigned char>(reason[0]))) {  // "N node(s) use ops ...:" + list
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    return reason.substr(0, 140);
  }
  const std::size_t node = reason.find("node '");
  const std::size_t colon = reason.find(": ", node == std::string::npos ? 0 : node);
  if (colon != std::string::npos) reason = reason.substr(colon + 2);
  return reason.substr(0, 90);
}

// Whether an import refusal is about an input that must be known at import.
bool needsConstantInput(const Status& s) {
  return s.message().find("known at import") != std::string::npos ||
         s.message().find("a runtime Pad constant_value") != std::string::npos;
}

std::vector<fs::path> dataSets(const fs::path& folder) {
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(entry.path());
  }
  std::sort(sets.begin(), sets.end());
  return sets;
}

// `model` with graph inputs 1.. moved to initializers holding the data set's values.
Expected<std::string> bindInputs(const onnx::ModelProto& model, const fs::path& data_set) {
  onnx::ModelProto bound = model;
  onnx::GraphProto& graph = *bound.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  for (int k = 0; k < graph.input_size(); ++k) {
    const fs::path path = data_set / fmt::format("input_{}.pb", k);
    if (k == 0 || !fs::exists(path)) {
      *kept.Add() = graph.input(k);
      continue;
    }
    onnx::TensorProto proto;
    SVM_RETURN_IF_ERROR(loadProto(path, proto));
    proto.set_name(graph.input(k).name());
    *graph.add_initializer() = proto;
  }
  *graph.mutable_input() = kept;
  std::string bytes;
  if (!bound.SerializeToString(&bytes)) return makeError(ErrorCode::Internal, "cannot serialize the bound model");
  return bytes;
}

// Imports `bytes` (or the folder's model.onnx when empty) and runs every data set; `bound_set`
// limits the run to one data set (the one whose inputs were bound).
ImportOutcome importAndRun(const fs::path& folder, const onnx::ModelProto& model, const std::string& bytes,
                           const std::vector<fs::path>& sets, Status* import_status) {
  const onnx::GraphProto& graph = model.graph();
  Session session(SessionOptions{.profile = false});
  if (Status s = session.set("jit_level", "O0"); !s.isOk()) return failed(s.toString());
  fs::path path = folder / "model.onnx";
  if (!bytes.empty()) {
    path = fs::temp_directory_path() /
           fmt::format("svm_node_{}_{}.onnx", folder.filename().string(), static_cast<long>(::getpid()));
    std::ofstream(path, std::ios::binary) << bytes;
  }
  Status loaded = session.load(path.string());
  if (!bytes.empty()) fs::remove(path);
  if (!loaded.isOk()) {
    *import_status = loaded;
    if (loaded.code() == ErrorCode::Unsupported) return skipped(reasonOf(loaded));
    return failed("import: " + loaded.toString());
  }
  const FunctionInfo info = *session.function("");
  for (const fs::path& data_set : sets) {
    std::map<std::string, Tensor> by_name;
    for (int k = 0; k < graph.input_size(); ++k) {
      onnx::TensorProto proto;
      const fs::path in = data_set / fmt::format("input_{}.pb", k);
      if (!fs::exists(in)) continue;
      if (!loadProto(in, proto).isOk()) return failed("cannot parse " + in.string());
      Expected<Tensor> t = tensorFromProto(proto, in.filename().string());
      if (!t) {
        if (t.status().code() == ErrorCode::Unsupported) return skipped(t.status().message().substr(0, 30) + " input");
        return failed(t.status().toString());
      }
      by_name[graph.input(k).name()] = *t;
    }
    std::vector<Value> args;
    for (const ParamInfo& p : info.params) {
      auto it = by_name.find(p.name);
      if (it == by_name.end()) return failed("no data for input '" + p.name + "'");
      args.push_back(Value::fromTensor(it->second));
    }
    Expected<std::vector<Value>> outputs = session.run(0, args);
    if (!outputs) return failed("run: " + outputs.status().toString());
    for (int k = 0; k < graph.output_size(); ++k) {
      onnx::TensorProto proto;
      const fs::path out = data_set / fmt::format("output_{}.pb", k);
      if (!loadProto(out, proto).isOk()) return failed("cannot parse " + out.string());
      Expected<Tensor> expected = tensorFromProto(proto, out.filename().string());
      if (!expected) return skipped(expected.status().message().substr(0, 30) + " output");
      const Value& actual = (*outputs)[static_cast<std::size_t>(k)];
      if (!actual.isTensor()) return failed(fmt::format("output {} is {}", k, actual.describe()));
      Status status = compareTensors(actual.tensor(), *expected, fmt::format("output {}", k));
      if (!status.isOk()) return failed(status.message());
    }
  }
  ImportOutcome ok;
  ok.passed = true;
  return ok;
}

ImportOutcome runImported(const fs::path& folder) {
  onnx::ModelProto model;
  if (!loadProto(folder / "model.onnx", model).isOk()) return failed("cannot parse model.onnx");
  for (const auto& input : model.graph().input()) {
    if (!input.type().has_tensor_type()) return skipped("non-tensor (sequence/optional) input");
  }
  const std::vector<fs::path> sets = dataSets(folder);
  if (sets.empty()) return failed("no test_data_set_N");
  Status import_status;
  ImportOutcome outcome = importAndRun(folder, model, "", sets, &import_status);
  if (outcome.skip.empty() || !needsConstantInput(import_status)) return outcome;
  // Attribute-like inputs given at run time: bind them, one import per data set.
  for (const fs::path& data_set : sets) {
    Expected<std::string> bytes = bindInputs(model, data_set);
    if (!bytes) return failed(bytes.status().toString());
    Status again;
    outcome = importAndRun(folder, model, *bytes, {data_set}, &again);
    if (!outcome.passed) return outcome;
  }
  outcome.bound = true;
  return outcome;
}

// Skip reasons across the run, for the summary.
std::map<std::string, int>& skipReasons() {
  static auto* reasons = new std::map<std::string, int>();
  return *reasons;
}

// ---- The parameterized test: one ctest case per node test folder ----

class OnnxNode : public ::testing::TestWithParam<NodeCase> {};

TEST_P(OnnxNode, MatchesReference) {
  const NodeCase& param = GetParam();
  ImportOutcome outcome = runImported(param.root / param.folder);
  if (!outcome.skip.empty()) {
    skipReasons()[param.op_type + ": " + outcome.skip]++;
    GTEST_SKIP() << outcome.skip;
  }
  ASSERT_TRUE(outcome.passed) << param.folder << ": " << outcome.failure;
  if (outcome.bound) RecordProperty("bound_inputs", "attribute-like inputs bound as initializers");
}

std::string caseName(const ::testing::TestParamInfo<NodeCase>& info) {
  std::string name = info.param.folder.rfind("test_", 0) == 0 ? info.param.folder.substr(5) : info.param.folder;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Onnx, OnnxNode, ::testing::ValuesIn(discoveredCases()), caseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxNode);

TEST(OnnxNodeDiscovery, MapsEnoughCases) {
  // The generated cases alone must be enough: the extra folder is optional.
  ASSERT_TRUE(fs::is_directory(kGeneratedRoot)) << kGeneratedRoot << " is missing (built by svm_onnx_node_data)";
  const auto generated = std::count_if(discoveredCases().begin(), discoveredCases().end(),
                                       [](const NodeCase& c) { return c.root == kGeneratedRoot; });
  EXPECT_GE(static_cast<int>(generated), kMinimumMappedCases)
      << "discovery found too few ONNX node tests of supported ops under " << kGeneratedRoot;
}

// All cases in one process: the count the issue asks for (>= 95% of the cases of supported ops),
// with every skip's reason and every failure printed.
TEST(OnnxNodeImport, SupportedOpsPass) {
  ASSERT_TRUE(fs::is_directory(kGeneratedRoot)) << kGeneratedRoot << " is missing (built by svm_onnx_node_data)";
  int total = 0, passed = 0, bound = 0;
  std::map<std::string, int> skips;
  std::vector<std::string> failures;
  for (const NodeCase& c : discoveredCases()) {
    ++total;
    ImportOutcome outcome = runImported(c.root / c.folder);
    if (outcome.passed) {
      ++passed;
      bound += outcome.bound ? 1 : 0;
    } else if (!outcome.skip.empty()) {
      skips[c.op_type + ": " + outcome.skip]++;
    } else {
      failures.push_back(fmt::format("{} ({}): {}", c.folder, c.op_type, outcome.failure.substr(0, 300)));
    }
  }
  const int failed_count = static_cast<int>(failures.size());
  std::string text = fmt::format(
      "\n[ONNX node conformance through the importer] {} cases of supported ops: {} passed ({} of them with "
      "attribute-like inputs bound as initializers), {} skipped, {} failed; {:.1f}% of all cases pass\n",
      total, passed, bound, total - passed - failed_count, failed_count, 100.0 * passed / std::max(total, 1));
  for (const auto& [reason, count] : skips) text += fmt::format("  skipped {:3} x {}\n", count, reason);
  for (const std::string& f : failures) text += "  FAILED " + f + "\n";
  std::fputs(text.c_str(), stdout);
  ASSERT_GT(total, 300) << "too few node tests of supported ops were found";
  EXPECT_EQ(failed_count, 0) << "node tests the importer accepts must match";
  EXPECT_GE(passed, kMinimumImportedPasses) << "fewer node tests pass through the importer than before";
}

// The convolution family's node tests alone (issue 21), so a regression there is not hidden by
// the other ops' passes: >= 95% of the cases the importer accepts match; every skip prints its reason.
TEST(OnnxNodeImport, ConvolutionFamilyPasses) {
  const std::set<std::string> family = {"Conv",
                                        "ConvTranspose",
                                        "MaxPool",
                                        "AveragePool",
                                        "GlobalAveragePool",
                                        "GlobalMaxPool",
                                        "BatchNormalization",
                                        "InstanceNormalization",
                                        "Resize",
                                        "Upsample",
                                        "DepthToSpace",
                                        "SpaceToDepth",
                                        "Pad"};
  int total = 0, passed = 0;
  std::map<std::string, int> skips;
  std::vector<std::string> failures;
  for (const NodeCase& c : discoveredCases()) {  // every family op is in the importer's table
    if (!family.count(c.op_type)) continue;
    ++total;
    ImportOutcome outcome = runImported(c.root / c.folder);
    if (outcome.passed) ++passed;
    else if (!outcome.skip.empty()) skips[c.op_type + ": " + outcome.skip]++;
    else failures.push_back(fmt::format("{} ({}): {}", c.folder, c.op_type, outcome.failure.substr(0, 300)));
  }
  std::string text =
      fmt::format("\n[ONNX node conformance, convolution family] {} cases: {} passed, {} skipped, {} failed\n", total,
                  passed, total - passed - static_cast<int>(failures.size()), failures.size());
  for (const auto& [reason, count] : skips) text += fmt::format("  skipped {:3} x {}\n", count, reason);
  for (const std::string& f : failures) text += "  FAILED " + f + "\n";
  std::fputs(text.c_str(), stdout);
  const int failed = static_cast<int>(failures.size());
  ASSERT_GE(total, 60) << "too few convolution-family node tests were found";
  EXPECT_GE(passed * 100, (passed + failed) * 95) << "fewer than 95% of the accepted convolution-family cases pass";
  EXPECT_GE(passed, 50) << "fewer convolution-family node tests pass than when this floor was set";
}

// The PyTorch-exported models of ONNX's backend test data (pytorch-converted, pytorch-operator),
// when the shared folder is there: each is imported and run, or skipped with its reason (an op
// or opset the importer refuses); one the importer accepts must match.
const fs::path kModelsRoot = fs::path(SHAPEVM_ONNX_MODELS_DIR);

TEST(OnnxModels, PytorchExportedModels) {
  std::error_code error;
  if (kModelsRoot.empty() || !fs::is_directory(kModelsRoot, error)) GTEST_SKIP() << kModelsRoot << " is absent";
  int total = 0, passed = 0, failed_count = 0;
  std::map<std::string, int> skips;
  for (const char* group : {"pytorch-converted", "pytorch-operator"}) {
    if (!fs::is_directory(kModelsRoot / group, error)) continue;
    std::vector<fs::path> folders;
    for (const auto& entry : fs::directory_iterator(kModelsRoot / group, error)) {
      if (entry.is_directory()) folders.push_back(entry.path());
    }
    std::sort(folders.begin(), folders.end());
    for (const fs::path& folder : folders) {
      ++total;
      ImportOutcome outcome = runImported(folder);
      if (outcome.passed) {
        ++passed;
      } else if (!outcome.skip.empty()) {
        skips[outcome.skip]++;
      } else {
        ++failed_count;
        ADD_FAILURE() << folder.filename().string() << ": " << outcome.failure;
      }
    }
  }
  std::string text = fmt::format("\n[PyTorch-exported ONNX models] {} models: {} passed, {} skipped, {} failed\n",
                                 total, passed, total - passed - failed_count, failed_count);
  for (const auto& [reason, count] : skips) text += fmt::format("  skipped {:3} x {}\n", count, reason);
  std::fputs(text.c_str(), stdout);
}

}  // namespace
}  // namespace shapevm
