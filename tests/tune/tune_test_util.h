// SPDX-License-Identifier: Apache-2.0
// Helpers of the tuner's tests: the matmul family behind a declared search space, and a fixture
// with a fresh tuning database (a temp dir, never ~/.cache) and short timing samples.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../jit/jit_test_util.h"
#include "support/tunables.h"
#include "tune/auto_tuner.h"

namespace shapevm::tune::testing {

// The matmul family behind a declared search space (its symbols: "sub_" + the family's stem).
class MatmulSubspace final : public jit::KernelFamily, public jit::LlvmKernelEmitter {
 public:
  explicit MatmulSubspace(std::vector<jit::KernelParams> space)
      : inner_(jit::familyFor(OpId::MatMul)), space_(std::move(space)) {}
  std::string_view name() const override { return "matmul_subspace"; }
  Status supports(const jit::KernelSpec& spec) const override { return inner_->supports(spec); }
  Status outputs(const jit::KernelSpec& spec, std::span<const Value* const> inputs, std::span<DType> dtypes,
                 std::span<Shape> shapes) const override {
    return inner_->outputs(spec, inputs, dtypes, shapes);
  }
  Status prepare(const jit::KernelSpec& spec, std::span<const Value* const> inputs, std::span<const Tensor> outputs,
                 jit::KernelArgs& args) const override {
    return inner_->prepare(spec, inputs, outputs, args);
  }
  Status emit(const jit::KernelSpec& spec, llvm::Module& module, const std::string& symbol) const override {
    return dynamic_cast<const jit::LlvmKernelEmitter&>(*inner_).emit(spec, module, symbol);
  }
  std::string symbolStem(const jit::KernelSpec& spec) const override { return "sub_" + inner_->symbolStem(spec); }
  std::vector<jit::KernelParams> searchSpace(const jit::KernelSpec&) const override { return space_; }

 private:
  const jit::KernelFamily* inner_;
  std::vector<jit::KernelParams> space_;
};

// Tunables reset, 3 timed samples of 50 us per candidate, and options_ naming a tuning database
// in a fresh temp dir (removed after the test).
class TunerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tunables::resetToDefaults();
    ASSERT_TRUE(Tunables::set(Tunable::TuneRepeats, 3).isOk());
    ASSERT_TRUE(Tunables::set(Tunable::TuneSampleUs, 50).isOk());
    char pattern[] = "/tmp/svm_tune_test_XXXXXX";
    dir_ = mkdtemp(pattern);
    options_.database_path = dir_ + "/tuning.jsonl";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    Tunables::resetToDefaults();
  }
  // The database's last line (the latest record).
  std::string lastLine() const {
    std::ifstream in(options_.database_path);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    return last;
  }
  std::string dir_;
  AutoTunerOptions options_;
};

}  // namespace shapevm::tune::testing
