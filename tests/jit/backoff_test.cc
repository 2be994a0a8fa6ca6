// SPDX-License-Identifier: Apache-2.0
// FailureBackoff: the wait doubles per failure from BackoffExecutions, counted from the region
// executions at the failure, and the BlacklistAfter-th failure blacklists.
#include <gtest/gtest.h>

#include "jit/backoff.h"

namespace shapevm::jit {
namespace {

class BackoffTest : public ::testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override { Tunables::resetToDefaults(); }
};

TEST_F(BackoffTest, WaitDoublesUntilBlacklisted) {
  ASSERT_TRUE(Tunables::set(Tunable::BackoffExecutions, 8).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::BlacklistAfter, 4).isOk());
  FailureBackoff b;
  EXPECT_TRUE(b.mayRetry(0));
  FailureBackoff::Verdict v = b.recordFailure(100);
  EXPECT_FALSE(v.blacklisted);
  EXPECT_EQ(v.wait, 8u);
  EXPECT_EQ(b.retry_after, 108u);
  EXPECT_FALSE(b.mayRetry(107));
  EXPECT_TRUE(b.mayRetry(108));
  v = b.recordFailure(110);
  EXPECT_EQ(v.wait, 16u);
  EXPECT_EQ(b.retry_after, 126u);
  v = b.recordFailure(126);
  EXPECT_EQ(v.wait, 32u);
  EXPECT_EQ(b.failures, 3);
  v = b.recordFailure(200);
  EXPECT_TRUE(v.blacklisted);
  EXPECT_EQ(b.failures, 4);
  EXPECT_EQ(b.retry_after, 158u);  // unchanged: a blacklisted thing is never retried
}

TEST_F(BackoffTest, BlacklistAfterOneAndNoWait) {
  ASSERT_TRUE(Tunables::set(Tunable::BackoffExecutions, 0).isOk());
  ASSERT_TRUE(Tunables::set(Tunable::BlacklistAfter, 2).isOk());
  FailureBackoff b;
  const FailureBackoff::Verdict first = b.recordFailure(5);
  EXPECT_FALSE(first.blacklisted);
  EXPECT_EQ(first.wait, 0u);
  EXPECT_TRUE(b.mayRetry(5));
  EXPECT_TRUE(b.recordFailure(6).blacklisted);
  ASSERT_TRUE(Tunables::set(Tunable::BlacklistAfter, 1).isOk());
  FailureBackoff once;
  EXPECT_TRUE(once.recordFailure(0).blacklisted);
}

}  // namespace
}  // namespace shapevm::jit
