// SPDX-License-Identifier: Apache-2.0
// O2's "cheaper interpreted than a launch" rule (jit/hot_path.h, cheaperInterpreted) on tiny
// operands: decided by the profiled element counts and the number of ops, never by the clock, so
// a preempted (or valgrind-slowed) tiny op stays interpreted; ops on larger operands are still
// timed, and compile. The counters are injected: no test here reads a clock (each timed case is
// 2.5x or more from the launch cost, far beyond the tick calibration's error).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "jit/hot_path.h"
#include "support/tunables.h"
#include "vm/profile.h"

namespace shapevm::jit {
namespace {

// A runtime of `sites.size()` op sites: site s saw the input signature `sites[s]` (each operand a
// float32 tensor of each shape, then the scalars), ran `calls`
// times and took `ns_per_call` each (the interpreter's counters).
struct Site {
  std::vector<Shape> tensors;
  std::vector<Value> scalars;
};
std::unique_ptr<FunctionRuntime> profiledSites(const std::vector<Site>& sites, std::uint64_t calls,
                                               double ns_per_call) {
  auto runtime = std::make_unique<FunctionRuntime>();
  runtime->slots = std::make_unique<DispatchSlot[]>(sites.size());
  runtime->profiles = std::make_unique<ProfileBuffer[]>(sites.size());
  const double ticks_per_ns = 1e9 / ticksToNanos(1'000'000'000);
  for (std::size_t s = 0; s < sites.size(); ++s) {
    std::vector<Value> values;
    for (const Shape& shape : sites[s].tensors)
      values.push_back(Value::fromTensor(Tensor::zeros(DType::Float32, shape).value()));
    for (const Value& scalar : sites[s].scalars) values.push_back(scalar);
    std::vector<const Value*> inputs;
    for (const Value& value : values) inputs.push_back(&value);
    runtime->profiles[s].record(inputs, 1);
    runtime->slots[s].calls.store(calls);
    runtime->slots[s].ticks.store(static_cast<std::uint64_t>(static_cast<double>(calls) * ns_per_call * ticks_per_ns));
  }
  return runtime;
}

void addCalls(FunctionRuntime& runtime, std::size_t sites, std::uint64_t calls, double ns) {
  const double ticks_per_ns = 1e9 / ticksToNanos(1'000'000'000);
  for (std::size_t s = 0; s < sites; ++s) {
    runtime.slots[s].calls.fetch_add(calls);
    runtime.slots[s].ticks.fetch_add(static_cast<std::uint64_t>(static_cast<double>(calls) * ns * ticks_per_ns));
  }
}

class CheaperInterpreted : public ::testing::Test {
 protected:
  void SetUp() override { Tunables::resetToDefaults(); }
  void TearDown() override { Tunables::resetToDefaults(); }
};

TEST_F(CheaperInterpreted, ATinyOpStaysInterpretedHoweverSlowItsClockReads) {
  // x + y on 1-element arrays, every call timed at 20 us (a loaded host, valgrind): the timing
  // rule alone would compile it after one interval; the element counts keep it interpreted.
  auto runtime = profiledSites({{{Shape{1}, Shape{1}}, {}}}, 1000, 20000.0);
  InterpretedCost cost;
  for (int look = 0; look < 4 * InterpretedCost::kIntervals; ++look) {
    EXPECT_TRUE(cheaperInterpreted(cost, {0}, *runtime, 2)) << "look " << look;
    addCalls(*runtime, 1, 4 * InterpretedCost::kMinInterval, 20000.0);
  }
  // A float operand (x * 1.5) and a product of element counts at the bound (8 x 8) are tiny too.
  auto scaled = profiledSites({{{Shape{2, 4}, Shape{8}}, {Value::fromFloat(1.5)}}}, 1000, 20000.0);
  for (int look = 0; look < 2 * InterpretedCost::kIntervals; ++look) {
    EXPECT_TRUE(cheaperInterpreted(cost, {0}, *scaled, 2)) << "look " << look;
    addCalls(*scaled, 1, InterpretedCost::kMinInterval, 20000.0);
  }
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *runtime, 1)) << "O1 compiles every hot op";
  ASSERT_TRUE(Tunables::set(Tunable::HotMs, 0).isOk());
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *runtime, 2)) << "hot_ms = 0 compiles whatever is hot";
}

TEST_F(CheaperInterpreted, ARangeOfTinyOpsCompilesOnceItOutweighsALaunch) {
  // The count of ops decides, whatever the clock says (here: 100 ns per op, faster than any host).
  const std::size_t stays = InterpretedCost::kTinyRangeOps - 1;
  ASSERT_GE(stays, 1u) << "a single tiny op must stay interpreted";
  const std::vector<Site> tiny(stays + 1, Site{{Shape{1}}, {Value::fromFloat(0.5)}});
  auto runtime = profiledSites(tiny, 1000, 100.0);
  std::vector<int> sites;
  for (std::size_t s = 0; s < stays; ++s) sites.push_back(static_cast<int>(s));
  InterpretedCost cost;
  EXPECT_TRUE(cheaperInterpreted(cost, sites, *runtime, 2)) << stays << " tiny ops: cheaper than one launch";
  sites.push_back(static_cast<int>(stays));
  EXPECT_FALSE(cheaperInterpreted(cost, sites, *runtime, 2)) << stays + 1 << " tiny ops: one launch is cheaper";
}

TEST_F(CheaperInterpreted, LargerOperandsAreTimedAndALargeOpCompiles) {
  // 1M-element add at 500 us per call: over 10x a launch, so it compiles after one interval.
  auto large = profiledSites({{{Shape{1024, 1024}, Shape{1024, 1024}}, {}}}, 10, 500e3);
  InterpretedCost cost;
  EXPECT_TRUE(cheaperInterpreted(cost, {0}, *large, 2)) << "the first look starts an interval";
  addCalls(*large, 1, InterpretedCost::kMinInterval, 500e3);
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *large, 2));
  // Past the element bound (65 elements, or 8 x 9 across two operands) the clock decides: a fast
  // mean stays interpreted, a slow one compiles once its intervals agree.
  for (const Site& site : {Site{{Shape{65}}, {}}, Site{{Shape{8}, Shape{9}}, {}}}) {
    auto fast = profiledSites({site}, 1000, 400.0);
    InterpretedCost fast_cost;
    EXPECT_TRUE(cheaperInterpreted(fast_cost, {0}, *fast, 2));
    auto slow = profiledSites({site}, 1000, 3000.0);
    InterpretedCost slow_cost;
    bool compiled = false;
    for (int look = 0; look <= InterpretedCost::kIntervals && !compiled; ++look) {
      compiled = !cheaperInterpreted(slow_cost, {0}, *slow, 2);
      addCalls(*slow, 1, InterpretedCost::kMinInterval, 3000.0);
    }
    EXPECT_TRUE(compiled) << "a timed op over the launch compiles";
  }
}

TEST_F(CheaperInterpreted, AnIntOrTupleOperandMayBeASizeSoItIsTimed) {
  // zeros(n)/broadcast_to(x, shape): an int or a tuple operand says nothing about the output's
  // size, so such an op is timed like a large one (here 50 us per call: it compiles).
  for (const Value& size : {Value::fromInt(1 << 20), Value::fromInts(std::vector<std::int64_t>{1024, 1024})}) {
    auto runtime = profiledSites({{{Shape{1}}, {size}}}, 10, 50e3);
    InterpretedCost cost;
    EXPECT_TRUE(cheaperInterpreted(cost, {0}, *runtime, 2));
    addCalls(*runtime, 1, InterpretedCost::kMinInterval, 50e3);
    EXPECT_FALSE(cheaperInterpreted(cost, {0}, *runtime, 2));
  }
  // Without a profile (profiling off), nothing is known: no evidence, compile.
  auto runtime = profiledSites({{{Shape{1}}, {}}}, 10, 50e3);
  runtime->profiles.reset();
  runtime->slots[0].ticks.store(0);
  InterpretedCost cost;
  EXPECT_FALSE(cheaperInterpreted(cost, {0}, *runtime, 2));
}

}  // namespace
}  // namespace shapevm::jit
