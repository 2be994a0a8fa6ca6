// SPDX-License-Identifier: Apache-2.0
// Status and Expected<T>: the error table (errors.def) gives every code a name and a non-empty
// meaning, messages keep their text through copies and moves, withContext() prefixes, and the
// SVM_RETURN_IF_ERROR / SVM_ASSIGN_OR_RETURN macros propagate the first failure unchanged.
#include "shapevm/status.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/logging.h"

namespace shapevm {
namespace {

struct ErrorRow {
  ErrorCode code;
  std::string_view name;
  std::string_view meaning;
};

// Built from the same X-macro as the enum, so a row added to errors.def is checked here too.
const std::vector<ErrorRow>& errorRows() {
  static const std::vector<ErrorRow> rows = {
#define SVM_ERROR(name, meaning) ErrorRow{ErrorCode::name, #name, meaning},
#include "shapevm/errors.def"
#undef SVM_ERROR
  };
  return rows;
}

TEST(ErrorTableTest, EveryRowHasItsNameAndANonEmptyMeaning) {
  ASSERT_GE(errorRows().size(), 16u);
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < errorRows().size(); ++i) {
    const ErrorRow& row = errorRows()[i];
    SCOPED_TRACE(std::string(row.name));
    EXPECT_EQ(static_cast<std::size_t>(row.code), i) << "enum values follow the table order";
    EXPECT_EQ(errorCodeName(row.code), row.name);
    EXPECT_EQ(errorCodeMeaning(row.code), row.meaning);
    EXPECT_FALSE(errorCodeMeaning(row.code).empty());
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate error name";
  }
}

TEST(ErrorTableTest, OkIsTheFirstRow) {
  EXPECT_EQ(static_cast<int>(ErrorCode::Ok), 0);
  EXPECT_EQ(errorCodeName(ErrorCode::Ok), "Ok");
  EXPECT_EQ(errorCodeMeaning(ErrorCode::Ok), "no error");
}

TEST(ErrorTableTest, SpecificCodesHaveTheirNames) {
  EXPECT_EQ(errorCodeName(ErrorCode::ShapeMismatch), "ShapeMismatch");
  EXPECT_EQ(errorCodeName(ErrorCode::OutOfMemory), "OutOfMemory");
  EXPECT_EQ(errorCodeName(ErrorCode::Internal), "Internal");
  EXPECT_EQ(errorCodeMeaning(ErrorCode::ShapeMismatch), "tensor shapes are incompatible for the operation");
}

TEST(ErrorTableTest, OutOfTableCodeIsNamedUnknown) {
  auto past_end = static_cast<ErrorCode>(errorRows().size());
  EXPECT_EQ(errorCodeName(past_end), "UnknownError");
  EXPECT_EQ(errorCodeMeaning(past_end), "unknown error");
  EXPECT_EQ(errorCodeName(static_cast<ErrorCode>(255)), "UnknownError");
}

TEST(StatusTest, DefaultIsOkWithEmptyMessage) {
  Status status;
  EXPECT_TRUE(status.isOk());
  EXPECT_TRUE(static_cast<bool>(status));
  EXPECT_EQ(status.code(), ErrorCode::Ok);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.toString(), "Ok");
  EXPECT_TRUE(Status::ok().isOk());
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status status(ErrorCode::ShapeMismatch, "add: cannot broadcast [2,3] with [4]");
  EXPECT_FALSE(status.isOk());
  EXPECT_FALSE(static_cast<bool>(status));
  EXPECT_EQ(status.code(), ErrorCode::ShapeMismatch);
  EXPECT_EQ(status.message(), "add: cannot broadcast [2,3] with [4]");
  EXPECT_EQ(status.toString(), "ShapeMismatch: add: cannot broadcast [2,3] with [4]");
}

TEST(StatusTest, ErrorWithEmptyMessageIsStillAnError) {
  Status status(ErrorCode::Internal, "");
  EXPECT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), ErrorCode::Internal);
  EXPECT_EQ(status.toString(), "Internal: ");
}

TEST(StatusTest, MakeErrorFormatsArguments) {
  Status status = makeError(ErrorCode::IndexOutOfRange, "axis {} out of range for rank {} ({})", 5, 2, "sum");
  EXPECT_EQ(status.code(), ErrorCode::IndexOutOfRange);
  EXPECT_EQ(status.message(), "axis 5 out of range for rank 2 (sum)");
}

TEST(StatusTest, WithContextPrefixesInOrder) {
  Status status(ErrorCode::KindMismatch, "expected a tensor");
  status.withContext("in op add").withContext("in function f at PC 0x0A (line 3)");
  EXPECT_EQ(status.code(), ErrorCode::KindMismatch);
  EXPECT_EQ(status.message(), "in function f at PC 0x0A (line 3): in op add: expected a tensor");
  EXPECT_EQ(status.toString(), "KindMismatch: in function f at PC 0x0A (line 3): in op add: expected a tensor");
}

TEST(StatusTest, WithContextIsANoOpOnSuccessAndForEmptyContext) {
  Status ok;
  ok.withContext("somewhere");
  EXPECT_TRUE(ok.isOk());
  EXPECT_EQ(ok.message(), "");

  Status error(ErrorCode::IoError, "cannot open x.svm");
  error.withContext("");
  EXPECT_EQ(error.message(), "cannot open x.svm");
}

TEST(StatusTest, CopyIsDeepAndIndependent) {
  Status original(ErrorCode::ParseError, "line 3: unexpected ')'");
  Status copy(original);
  EXPECT_EQ(copy.code(), ErrorCode::ParseError);
  EXPECT_EQ(copy.message(), original.message());
  copy.withContext("file a.svm");
  EXPECT_EQ(copy.message(), "file a.svm: line 3: unexpected ')'");
  EXPECT_EQ(original.message(), "line 3: unexpected ')'") << "editing a copy must not change the original";

  Status assigned;
  assigned = original;
  EXPECT_EQ(assigned.code(), ErrorCode::ParseError);
  EXPECT_EQ(assigned.message(), "line 3: unexpected ')'");

  // Assigning success over an error clears it; self-assignment keeps it.
  assigned = Status::ok();
  EXPECT_TRUE(assigned.isOk());
  Status& alias = original;
  original = alias;
  EXPECT_EQ(original.message(), "line 3: unexpected ')'");

  Status ok_copy(assigned);
  EXPECT_TRUE(ok_copy.isOk());
}

TEST(StatusTest, MoveTransfersTheError) {
  Status original(ErrorCode::VerifyError, "register r9 out of range");
  Status moved(std::move(original));
  EXPECT_EQ(moved.code(), ErrorCode::VerifyError);
  EXPECT_EQ(moved.message(), "register r9 out of range");

  Status target(ErrorCode::Internal, "old");
  target = std::move(moved);
  EXPECT_EQ(target.code(), ErrorCode::VerifyError);
  EXPECT_EQ(target.message(), "register r9 out of range");
}

TEST(ExpectedTest, HoldsAValue) {
  Expected<int> value = 42;
  ASSERT_TRUE(value.hasValue());
  EXPECT_TRUE(static_cast<bool>(value));
  EXPECT_EQ(value.value(), 42);
  EXPECT_EQ(*value, 42);
  *value = 7;
  EXPECT_EQ(value.value(), 7);
  EXPECT_TRUE(value.takeStatus().isOk());
}

TEST(ExpectedTest, HoldsAnError) {
  Expected<int> error = Status(ErrorCode::UnknownName, "no op 'frob'");
  ASSERT_FALSE(error.hasValue());
  EXPECT_FALSE(static_cast<bool>(error));
  EXPECT_EQ(error.status().code(), ErrorCode::UnknownName);
  EXPECT_EQ(error.status().message(), "no op 'frob'");
  Status taken = error.takeStatus();
  EXPECT_EQ(taken.code(), ErrorCode::UnknownName);
  EXPECT_EQ(taken.message(), "no op 'frob'");
}

TEST(ExpectedTest, ArrowAndMoveOutOfValue) {
  Expected<std::string> text = std::string("hello");
  EXPECT_EQ(text->size(), 5u);
  std::string moved = std::move(text).value();
  EXPECT_EQ(moved, "hello");

  Expected<std::unique_ptr<int>> owner = std::make_unique<int>(9);
  std::unique_ptr<int> taken = std::move(owner).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 9);
}

TEST(ExpectedTest, CopyKeepsBothSides) {
  Expected<std::vector<int>> original = std::vector<int>{1, 2, 3};
  Expected<std::vector<int>> copy = original;
  copy->push_back(4);
  EXPECT_EQ(original->size(), 3u);
  EXPECT_EQ(copy->size(), 4u);

  Expected<std::vector<int>> error = Status(ErrorCode::BadFormat, "truncated");
  Expected<std::vector<int>> error_copy = error;
  EXPECT_EQ(error_copy.status().message(), "truncated");
  EXPECT_EQ(error.status().message(), "truncated");
}

// ---- Propagation macros ----

int g_steps_after_failure = 0;

Status failIf(bool fail, ErrorCode code, const char* message) {
  if (fail) return Status(code, message);
  return Status::ok();
}

Status runSteps(bool fail_first, bool fail_second) {
  SVM_RETURN_IF_ERROR(failIf(fail_first, ErrorCode::InvalidArgument, "first"));
  SVM_RETURN_IF_ERROR(failIf(fail_second, ErrorCode::LimitExceeded, "second"));
  ++g_steps_after_failure;
  return Status::ok();
}

TEST(MacroTest, ReturnIfErrorStopsAtTheFirstFailure) {
  g_steps_after_failure = 0;
  EXPECT_TRUE(runSteps(false, false).isOk());
  EXPECT_EQ(g_steps_after_failure, 1);

  Status first = runSteps(true, true);
  EXPECT_EQ(first.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(first.message(), "first");

  Status second = runSteps(false, true);
  EXPECT_EQ(second.code(), ErrorCode::LimitExceeded);
  EXPECT_EQ(second.message(), "second");
  EXPECT_EQ(g_steps_after_failure, 1) << "code after a failing SVM_RETURN_IF_ERROR must not run";
}

Expected<int> parsePositive(int v) {
  if (v <= 0) return makeError(ErrorCode::InvalidArgument, "{} is not positive", v);
  return v;
}

Expected<std::unique_ptr<int>> makeBox(int v) {
  if (v < 0) return makeError(ErrorCode::OutOfMemory, "box {}", v);
  return std::make_unique<int>(v);
}

Expected<int> addPositives(int a, int b) {
  SVM_ASSIGN_OR_RETURN(int x, parsePositive(a));
  SVM_ASSIGN_OR_RETURN(int y, parsePositive(b));  // two uses in one scope need distinct temporaries
  return x + y;
}

Expected<int> unbox(int v) {
  SVM_ASSIGN_OR_RETURN(std::unique_ptr<int> box, makeBox(v));  // move-only value
  int existing = 0;
  SVM_ASSIGN_OR_RETURN(existing, parsePositive(*box + 1));  // assigns to an existing variable
  return existing;
}

Status statusFromExpected(int v) {
  SVM_ASSIGN_OR_RETURN(int x, parsePositive(v));
  return x > 100 ? makeError(ErrorCode::LimitExceeded, "{} too big", x) : Status::ok();
}

TEST(MacroTest, AssignOrReturnUnwrapsOrPropagates) {
  Expected<int> sum = addPositives(2, 3);
  ASSERT_TRUE(sum.hasValue());
  EXPECT_EQ(*sum, 5);

  Expected<int> bad_first = addPositives(-1, 3);
  ASSERT_FALSE(bad_first.hasValue());
  EXPECT_EQ(bad_first.status().code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(bad_first.status().message(), "-1 is not positive");

  Expected<int> bad_second = addPositives(1, 0);
  ASSERT_FALSE(bad_second.hasValue());
  EXPECT_EQ(bad_second.status().message(), "0 is not positive");
}

TEST(MacroTest, AssignOrReturnWorksWithMoveOnlyValuesAndExistingVariables) {
  Expected<int> ok = unbox(4);
  ASSERT_TRUE(ok.hasValue());
  EXPECT_EQ(*ok, 5);
  Expected<int> bad = unbox(-3);
  ASSERT_FALSE(bad.hasValue());
  EXPECT_EQ(bad.status().code(), ErrorCode::OutOfMemory);
  EXPECT_EQ(bad.status().message(), "box -3");
}

TEST(MacroTest, AssignOrReturnInAStatusFunction) {
  EXPECT_TRUE(statusFromExpected(5).isOk());
  Status bad = statusFromExpected(-2);
  EXPECT_EQ(bad.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(bad.message(), "-2 is not positive");
  EXPECT_EQ(statusFromExpected(500).code(), ErrorCode::LimitExceeded);
}

// ---- Logging threshold (the sink is stderr; only the gate is observable here) ----

TEST(LogTest, ThresholdGatesLevels) {
  Log::setThreshold(LogLevel::Warn);
  EXPECT_FALSE(Log::enabled(LogLevel::Debug));
  EXPECT_FALSE(Log::enabled(LogLevel::Info));
  EXPECT_TRUE(Log::enabled(LogLevel::Warn));
  EXPECT_TRUE(Log::enabled(LogLevel::Error));
  Log::setThreshold(LogLevel::Debug);
  EXPECT_TRUE(Log::enabled(LogLevel::Debug));
  Log::setThreshold(LogLevel::Error);
  EXPECT_FALSE(Log::enabled(LogLevel::Warn));
  EXPECT_TRUE(Log::enabled(LogLevel::Error));
  Log::setThreshold(LogLevel::Warn);
}

TEST(LogTest, WriteFormatsOneLineOnStderr) {
  Log::setThreshold(LogLevel::Info);
  testing::internal::CaptureStderr();
  logAt(LogLevel::Info, "JIT", "Hot path detected at PC=0x{:02X}", 10);
  logAt(LogLevel::Debug, "JIT", "suppressed {}", 1);
  std::string text = testing::internal::GetCapturedStderr();
  Log::setThreshold(LogLevel::Warn);
  EXPECT_EQ(text, "[INFO] JIT: Hot path detected at PC=0x0A\n");
}

// stderr on a full disk (/dev/full: every write fails with ENOSPC): the line is lost, and logging
// neither throws nor fails the caller (fmt::print would throw std::system_error here).
TEST(LogTest, ALineStderrCannotTakeIsLostWithoutAnError) {
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (full < 0) GTEST_SKIP() << "no /dev/full";
  std::fflush(stderr);
  const int saved = ::dup(2);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(::dup2(full, 2), 2);
  bool threw = false;
  try {
    logAt(LogLevel::Warn, "JIT", "kernel cache: cannot write {} ({} bytes)", "entry", 1636);
  } catch (...) {
    threw = true;
  }
  std::clearerr(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(full);
  EXPECT_FALSE(threw) << "a log line stderr cannot take threw";
  // stderr works again afterwards.
  Log::setThreshold(LogLevel::Warn);
  testing::internal::CaptureStderr();
  logAt(LogLevel::Warn, "JIT", "after {}", 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[WARN] JIT: after 1\n");
}

}  // namespace
}  // namespace shapevm
