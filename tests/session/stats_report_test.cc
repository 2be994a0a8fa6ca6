// SPDX-License-Identifier: Apache-2.0
// The Session's per-shape latency book (session/stats_report.h): exact figures while a series is
// small, bounded memory however many runs or shapes a long-lived Session sees (a uniform sample
// for median and p99, exact count, min and max), and shape labels only for dynamic parameters.
#include "session/stats_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bytecode/module.h"
#include "bytecode/shape_token.h"

namespace shapevm {
namespace {

Function twoParams() {  // x: f32[?0, 4] (dynamic), w: f32[4, 4] (fixed: not part of the label)
  Function fn;
  fn.name = "f";
  fn.params.push_back(Param{"x", ValueKind::Tensor, parseTensorDescriptor("f32[?0,4]").value()});
  fn.params.push_back(Param{"w", ValueKind::Tensor, parseTensorDescriptor("f32[4,4]").value()});
  return fn;
}

std::vector<Value> argsWithRows(std::int64_t rows) {
  return {Value::fromTensor(Tensor::zeros(DType::Float32, Shape({rows, 4})).value()),
          Value::fromTensor(Tensor::zeros(DType::Float32, Shape({4, 4})).value())};
}

TEST(LatencySeries, ExactWhileSmall) {
  LatencySeries series;
  std::vector<double> values;
  std::mt19937 rng(1);
  for (int i = 0; i < 301; ++i) {
    values.push_back(std::uniform_real_distribution<double>(0.5, 9.0)(rng));
    series.add(values.back());
  }
  const LatencySummary s = series.summary();
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(series.runs, 301u);
  EXPECT_DOUBLE_EQ(s.median, sorted[150]);
  EXPECT_DOUBLE_EQ(s.low, sorted.front());
  EXPECT_DOUBLE_EQ(s.high, sorted.back());
  EXPECT_DOUBLE_EQ(s.p99, summarizeLatency(values).p99);
}

TEST(LatencySeries, BoundedAndStillRepresentativeOverManyRuns) {
  LatencySeries series;
  // 200k runs: 90% take 1 ms, 10% take 10 ms, and one outlier of 500 ms in the middle.
  for (int i = 0; i < 200000; ++i) series.add(i == 100000 ? 500.0 : (i % 10 == 9 ? 10.0 : 1.0));
  EXPECT_EQ(series.runs, 200000u);
  EXPECT_EQ(series.sample.size(), kLatencySample);  // memory stays bounded
  const LatencySummary s = series.summary();
  EXPECT_DOUBLE_EQ(s.median, 1.0);
  EXPECT_DOUBLE_EQ(s.p99, 10.0);  // the 10% tail is in the sample; the single outlier is not the p99
  EXPECT_DOUBLE_EQ(s.low, 1.0);
  EXPECT_DOUBLE_EQ(s.high, 500.0);  // min and max stay exact
  // A late change in latency shows up: the sample keeps replacing entries uniformly.
  for (int i = 0; i < 400000; ++i) series.add(3.0);
  EXPECT_DOUBLE_EQ(series.summary().median, 3.0);
}

TEST(LatencyBook, LabelsDynamicParametersAndKeepsFirstSeenOrder) {
  const Function fn = twoParams();
  LatencyBook book;
  for (std::int64_t rows : {7, 3, 7, 7, 3, 11}) {
    const std::vector<Value> args = argsWithRows(rows);
    book.add(fn, args, static_cast<double>(rows));
  }
  ASSERT_EQ(book.entries().size(), 3u);
  EXPECT_EQ(book.entries()[0].label, "x=(7,4)");
  EXPECT_EQ(book.entries()[1].label, "x=(3,4)");
  EXPECT_EQ(book.entries()[2].label, "x=(11,4)");
  EXPECT_EQ(book.entries()[0].series.runs, 3u);
  EXPECT_EQ(book.entries()[1].series.runs, 2u);
  EXPECT_EQ(book.all().runs, 6u);
  EXPECT_DOUBLE_EQ(book.all().summary().high, 11.0);
}

TEST(LatencyBook, ManyShapesShareOneOtherSeriesPastTheCap) {
  const Function fn = twoParams();
  LatencyBook book;
  const std::int64_t shapes = static_cast<std::int64_t>(kLatencyShapes) + 50;
  for (std::int64_t rows = 1; rows <= shapes; ++rows) {
    const std::vector<Value> args = argsWithRows(rows);
    book.add(fn, args, 1.0);
    book.add(fn, args, 2.0);
  }
  ASSERT_EQ(book.entries().size(), kLatencyShapes + 1);
  EXPECT_EQ(book.entries().back().label, "(other shapes)");
  EXPECT_EQ(book.entries().back().series.runs, 100u);
  EXPECT_EQ(book.entries().front().series.runs, 2u);
  EXPECT_EQ(book.all().runs, static_cast<std::uint64_t>(2 * shapes));
  // A shape seen before the cap keeps its own series afterwards.
  const std::vector<Value> first = argsWithRows(1);
  book.add(fn, first, 4.0);
  EXPECT_EQ(book.entries().front().series.runs, 3u);
}

}  // namespace
}  // namespace shapevm
