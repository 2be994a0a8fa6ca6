// SPDX-License-Identifier: Apache-2.0
// A ShapeVM program from outside the tree: load a .py program (a file given on the command line,
// e.g. examples/lstm_cell.py, or a small inline function), run it at O2 over a few shapes with random inputs, print
// the outputs' shapes and the statistics, and check every output against an O0 Session on the
// same inputs. Exit code 0 when they agree (relative L2 <= 1e-5), 1 otherwise, 2 on an error.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <shapevm/shapevm.h>

namespace {

// Used when no .py file is given: a softmax of a scaled matmul with a named dynamic dim.
constexpr const char* kInlineProgram = R"(from shapevm import ops, Tensor


def scores(x: Tensor["rows", 64], w: Tensor[64, 32], t: float):
    return ops.softmax(ops.matmul(x, w) * t, axis=-1)
)";

int fail(const shapevm::Status& status) {
  std::fprintf(stderr, "shapevm_example: error: %s\n", status.toString().c_str());
  return 2;
}

// Random inputs for `fn`: dynamic dims take `dynamic` (named ones) and static dims their size.
shapevm::Expected<std::vector<shapevm::Value>> randomArgs(const shapevm::FunctionInfo& fn, std::int64_t dynamic,
                                                          std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<shapevm::Value> args;
  for (const shapevm::ParamInfo& p : fn.params) {
    if (p.kind == shapevm::ValueKind::Float) {
      args.push_back(shapevm::Value::fromFloat(0.5));
      continue;
    }
    if (p.kind == shapevm::ValueKind::Int) {
      args.push_back(shapevm::Value::fromInt(2));
      continue;
    }
    if (p.kind == shapevm::ValueKind::Bool) {
      args.push_back(shapevm::Value::fromBool(true));
      continue;
    }
    shapevm::Shape shape;
    for (const shapevm::DimInfo& d : p.dims) shape.push_back(d.size >= 0 ? d.size : dynamic);
    if (p.dtype.value_or(shapevm::DType::Float32) != shapevm::DType::Float32) {
      return shapevm::makeError(shapevm::ErrorCode::Unsupported,
                                "parameter '{}' is {}: this example fills float32 only", p.name, p.token);
    }
    auto tensor = shapevm::Tensor::empty(shapevm::DType::Float32, shape);
    if (!tensor) return tensor.status();
    for (std::int64_t i = 0; i < tensor->numel(); ++i) tensor->data<float>()[i] = normal(rng);
    args.push_back(shapevm::Value::fromTensor(*tensor));
  }
  return args;
}

double relativeL2(const shapevm::Tensor& got, const shapevm::Tensor& want) {
  double diff = 0, ref = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.elementAsDouble(i), g = got.elementAsDouble(i);
    diff += (g - w) * (g - w);
    ref += w * w;
  }
  return std::sqrt(diff / (ref > 0 ? ref : 1e-300));
}

}  // namespace

int main(int argc, char** argv) {
  // Zero thresholds: regions are hot at once, so a short run shows compiled kernels.
  for (const char* key : {"hot_count", "hot_ms", "warmup"}) {
    if (shapevm::Status s = shapevm::Session::setTunable(key, "0"); !s.isOk()) return fail(s);
  }
  shapevm::SessionOptions options;
  options.jit_wait = true;       // each run waits for the compiles it queued (reproducible)
  options.tuning_cache = false;  // leave the user's tuning database alone
  options.tune_budget_ms = 200;
  shapevm::Session fast(options), reference(options);
  // An interpreter-only ShapeVM (SHAPEVM_ENABLE_JIT=OFF) refuses O1/O2: both Sessions run at O0 then.
  const char* level = shapevm::Session::jitAvailable() ? "O2" : "O0";
  if (shapevm::Status s = fast.set("jit_level", level); !s.isOk()) return fail(s);
  if (shapevm::Status s = reference.set("jit_level", "O0"); !s.isOk()) return fail(s);

  shapevm::LoadOptions load;
  for (shapevm::Session* session : {&fast, &reference}) {
    shapevm::Status loaded = argc > 1 ? session->load(argv[1], load) : session->loadSource(kInlineProgram, [] {
      shapevm::LoadOptions inline_source;
      inline_source.filename = "scores.py";
      return inline_source;
    }());
    if (!loaded.isOk()) return fail(loaded);
  }
  if (shapevm::Status why = fast.jitStatus(); !why.isOk())
    std::printf("note: the JIT is off (%s)\n", why.toString().c_str());
  auto fn = fast.function("");
  if (!fn) return fail(fn.status());
  std::printf("function %s(", fn->name.c_str());
  for (std::size_t i = 0; i < fn->params.size(); ++i) {
    const shapevm::ParamInfo& p = fn->params[i];
    const std::string type =
        p.kind == shapevm::ValueKind::Tensor ? p.token : std::string(shapevm::valueKindName(p.kind));
    std::printf("%s%s: %s", i ? ", " : "", p.name.c_str(), type.c_str());
  }
  std::printf(") -> %d outputs\n", fn->num_outputs);

  std::mt19937_64 rng(7);
  bool agree = true;
  for (std::int64_t dynamic : {3, 10, 20, 7, 3, 10, 20}) {
    auto args = randomArgs(*fn, dynamic, rng);
    if (!args) return fail(args.status());
    auto got = fast.run(fn->index, *args);
    if (!got) return fail(got.status());
    auto want = reference.run(fn->index, *args);
    if (!want) return fail(want.status());
    std::printf("dynamic dims = %2lld:", static_cast<long long>(dynamic));
    for (std::size_t i = 0; i < got->size(); ++i) {
      const shapevm::Value& out = (*got)[i];
      if (!out.isTensor()) {
        std::printf(" %s", out.describe().c_str());
        continue;
      }
      const double err = relativeL2(out.tensor(), (*want)[i].tensor());
      agree = agree && err <= 1e-5 && out.tensor().shape() == (*want)[i].tensor().shape();
      std::printf(" %s (rel L2 vs O0 %.1e)", out.tensor().describe().c_str(), err);
    }
    std::printf("\n");
  }
  const shapevm::SessionStats st = fast.stats();
  std::printf(
      "%s: %llu runs, %llu compiled / %llu interpreted op launches, %llu kernels installed in %.1f ms, "
      "%llu allocations (%llu from the system)\n",
      level, static_cast<unsigned long long>(st.runs), static_cast<unsigned long long>(st.launches_compiled),
      static_cast<unsigned long long>(st.launches_interpreted), static_cast<unsigned long long>(st.kernels_installed),
      st.compile_ms, static_cast<unsigned long long>(st.allocations_requested),
      static_cast<unsigned long long>(st.allocations_system));
  std::printf("%s", st.jit_report.c_str());
  std::printf(agree ? "OK: %s matches O0\n" : "MISMATCH: %s differs from O0\n", level);
  return agree ? 0 : 1;
}
