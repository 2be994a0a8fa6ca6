// SPDX-License-Identifier: Apache-2.0
// DimRange, the one "which extents may this dim take" type behind shape tokens, guards and kernel
// specs: acceptance with ranges and divisors, coverage (a narrower guard inside a wider one), the
// extremes and example extents validation and the CLI pick, and the text form.
#include <gtest/gtest.h>

#include "tensor/dim_range.h"

namespace shapevm {
namespace {

TEST(DimRange, AcceptsByRangeAndDivisor) {
  const DimRange any;
  EXPECT_TRUE(any.unconstrained());
  EXPECT_TRUE(any.accepts(0));
  EXPECT_TRUE(any.accepts(DimRange::kUnbounded));
  const DimRange r = DimRange::between(16, 64, 8);
  EXPECT_FALSE(r.accepts(8));
  EXPECT_TRUE(r.accepts(16));
  EXPECT_FALSE(r.accepts(20));
  EXPECT_TRUE(r.accepts(64));
  EXPECT_FALSE(r.accepts(72));
  EXPECT_TRUE(DimRange::exactly(5).accepts(5));
  EXPECT_FALSE(DimRange::exactly(5).accepts(6));
  EXPECT_TRUE(DimRange::exactly(5).single());
}

TEST(DimRange, CoversNarrowerRangesWithCompatibleDivisors) {
  const DimRange wide = DimRange::between(1, 1024, 4);
  EXPECT_TRUE(wide.covers(DimRange::between(8, 512, 8)));
  EXPECT_FALSE(wide.covers(DimRange::between(8, 512, 2))) << "2 does not guarantee divisibility by 4";
  EXPECT_FALSE(wide.covers(DimRange::between(0, 512, 8)));
  EXPECT_FALSE(wide.covers(DimRange::between(8, 2048, 8)));
  EXPECT_TRUE(DimRange{}.covers(wide));
  EXPECT_FALSE(wide.covers(DimRange{}));
}

TEST(DimRange, ExtremesAndNearestAcceptedExtent) {
  const DimRange r = DimRange::between(10, 100, 8);
  EXPECT_EQ(r.smallestAccepted(), 16);
  EXPECT_EQ(r.largestAccepted(), 96);
  EXPECT_EQ(r.nearestAccepted(3), 16);
  EXPECT_EQ(r.nearestAccepted(41), 48);
  EXPECT_EQ(r.nearestAccepted(48), 48);
  EXPECT_EQ(DimRange::between(4, 7).nearestAccepted(64), 7);
  EXPECT_EQ(DimRange{}.nearestAccepted(32), 32);
}

TEST(DimRange, TextForm) {
  EXPECT_EQ(DimRange{}.toString(), "");
  EXPECT_EQ(DimRange::between(320, 960).toString(), "320..960");
  EXPECT_EQ(DimRange::between(16, DimRange::kUnbounded).toString(), "16..");
  EXPECT_EQ(DimRange::between(0, DimRange::kUnbounded, 8).toString(), "%8");
  EXPECT_EQ(DimRange::between(0, 64, 8).toString(), "0..64%8");
}

}  // namespace
}  // namespace shapevm
