// SPDX-License-Identifier: Apache-2.0
// Shape tokens: every documented text form parses and prints back exactly; bad forms are
// ParseErrors naming the token; tensors are checked against tokens with clear messages.
#include <gtest/gtest.h>

#include "bytecode/shape_token.h"

namespace shapevm {
namespace {

TEST(ShapeToken, DocumentedFormsRoundTrip) {
  for (const char* text : {"f32[?0,128,768]", "[16..64,128,768]", "[?0%8,128]", "bf16[?1:320..960,128]", "[*]", "_",
                           "[]", "i64[?]", "[16..]", "[?3:16..64%8]", "f16[*]", "bool[1,?2]"}) {
    auto token = parseTensorDescriptor(text);
    ASSERT_TRUE(token.hasValue()) << text << ": " << token.status().toString();
    EXPECT_EQ(token->toString(), text);
  }
}

TEST(ShapeToken, SpacesAreAcceptedAndDroppedWhenPrinted) {
  auto token = parseTensorDescriptor(" f32[ ?0 , 128 ] ");
  ASSERT_TRUE(token.hasValue());
  EXPECT_EQ(token->toString(), "f32[?0,128]");
}

TEST(ShapeToken, FieldsAreFormal) {
  auto token = parseTensorDescriptor("bf16[?1:320..960%8,128]");
  ASSERT_TRUE(token.hasValue());
  EXPECT_EQ(token->dtype, DType::BFloat16);
  ASSERT_EQ(token->rank(), 2);
  const DimToken& dim = token->dims[0];
  EXPECT_FALSE(dim.is_static);
  EXPECT_EQ(dim.id, 1);
  EXPECT_EQ(dim.lo, 320);
  EXPECT_EQ(dim.hi, 960);
  EXPECT_EQ(dim.divisor, 8);
  EXPECT_TRUE(token->dims[1].is_static);
  EXPECT_EQ(token->dims[1].size, 128);
}

// A dynamic dim's constraints are a DimRange (the type guards and kernel specs share); "no range"
// is the unconstrained range, and "0.." says nothing more than "?", so it prints as "?".
TEST(ShapeToken, DynamicDimConstraintsAreADimRange) {
  auto token = parseTensorDescriptor("[?1:320..960%8,?2,16..,0..]");
  ASSERT_TRUE(token.hasValue()) << token.status().toString();
  EXPECT_EQ(static_cast<const DimRange&>(token->dims[0]), DimRange::between(320, 960, 8));
  EXPECT_TRUE(token->dims[1].unconstrained());
  EXPECT_EQ(static_cast<const DimRange&>(token->dims[2]), DimRange::between(16, DimRange::kUnbounded));
  EXPECT_TRUE(token->dims[3].unconstrained());
  EXPECT_EQ(token->toString(), "[?1:320..960%8,?2,16..,?]");
  EXPECT_FALSE(parseTensorDescriptor("[0..9223372036854775807]").hasValue()) << "the largest int64 is 'unbounded'";
}

TEST(ShapeToken, BadFormsNameTheToken) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {Case{"f33[4]", "unknown dtype 'f33'"}, Case{"[4", "expected [dims]"}, Case{"[?0,abc]", "bad dim 'abc'"},
                        Case{"[-1]", "extent must be >= 0"}, Case{"[64..16]", "upper bound must be an int >= lo"},
                        Case{"[?0%0]", "divisor must be a positive int"}, Case{"[4,]", "trailing comma"},
                        Case{"[1,2,3,4,5,6,7,8,9]", "rank exceeds 8"}}) {
    auto token = parseTensorDescriptor(c.text);
    ASSERT_FALSE(token.hasValue()) << c.text;
    EXPECT_EQ(token.status().code(), ErrorCode::ParseError);
    EXPECT_NE(token.status().message().find(c.message), std::string::npos) << token.status().message();
  }
}

TEST(ShapeToken, AcceptsChecksRangesAndDivisors) {
  auto token = parseTensorDescriptor("[?0:16..64%8]");
  ASSERT_TRUE(token.hasValue());
  const DimToken& dim = token->dims[0];
  EXPECT_TRUE(dim.accepts(16));
  EXPECT_TRUE(dim.accepts(64));
  EXPECT_FALSE(dim.accepts(8));    // below the range
  EXPECT_FALSE(dim.accepts(72));   // above the range
  EXPECT_FALSE(dim.accepts(20));   // not a multiple of 8
  EXPECT_TRUE(DimToken::fixed(3).accepts(3));
  EXPECT_FALSE(DimToken::fixed(3).accepts(4));
}

TEST(ShapeToken, CheckNamesWhatTokenAndShape) {
  auto tensor = Tensor::zeros(DType::Float32, Shape{2, 3});
  ASSERT_TRUE(tensor.hasValue());
  auto ok = parseTensorDescriptor("f32[?0,3]");
  EXPECT_TRUE(ok->check(*tensor, "x").isOk());
  Status dtype = parseTensorDescriptor("i64[2,3]")->check(*tensor, "x");
  EXPECT_EQ(dtype.code(), ErrorCode::DTypeMismatch);
  Status rank = parseTensorDescriptor("[?0]")->check(*tensor, "x");
  EXPECT_EQ(rank.code(), ErrorCode::ShapeMismatch);
  Status dim = parseTensorDescriptor("[2,4]")->check(*tensor, "param x");
  EXPECT_EQ(dim.code(), ErrorCode::ShapeMismatch);
  EXPECT_NE(dim.message().find("param x: dim 1 is 3 but the token [2,4] requires 4"), std::string::npos) << dim.message();
  EXPECT_TRUE(TensorDescriptor::anyTensor().check(*tensor, "x").isOk());
  EXPECT_EQ(TensorDescriptor::notTensor().check(*tensor, "x").code(), ErrorCode::KindMismatch);
}

}  // namespace
}  // namespace shapevm
