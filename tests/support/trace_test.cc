// SPDX-License-Identifier: Apache-2.0
// The timeline's buffers and writer (support/trace.h): nothing is recorded while off; events from
// several threads land in one valid Trace Event Format file with a thread_name per thread; a bad
// path fails at start(); a second start() while one runs is refused; Args escape their strings.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/trace.h"

namespace shapevm {
namespace {

std::filesystem::path tempFile(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string("svm_trace_test_") + name + ".json");
}

nlohmann::json readJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TraceTest, EventsFromThreadsWithNamesAndNothingWhileOff) {
  trace::complete("test", "before start", 0, 1);  // off: dropped
  EXPECT_FALSE(trace::enabled());
  const auto path = tempFile("threads");
  ASSERT_TRUE(trace::start(path.string()).isOk());
  EXPECT_TRUE(trace::enabled() && !trace::opsEnabled());
  {
    trace::Scope scope("test", "main work");
    scope.args().add("quote", "a \"b\"\n").add("n", 3).addPc(14);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      trace::nameThread("worker " + std::to_string(t));
      for (int i = 0; i < 700; ++i) trace::complete("test", "step", trace::nowUs(), 0.5);  // > one chunk
      trace::instant("test", "done", trace::Args().add("t", t));
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(trace::stop().isOk());
  EXPECT_FALSE(trace::enabled());
  trace::complete("test", "after stop", 0, 1);  // off again: dropped

  const nlohmann::json doc = readJson(path);
  std::map<int, std::string> names;
  std::map<std::string, int> counts;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M") {
      if (e.at("name") == "thread_name") names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
      continue;
    }
    EXPECT_TRUE(names.count(e.at("tid").get<int>())) << "event before its thread's metadata: " << e.dump();
    ++counts[e.at("name").get<std::string>()];
    if (e.at("name") == "main work") {
      EXPECT_EQ(e.at("args").at("quote"), "a \"b\"\n");
      EXPECT_EQ(e.at("args").at("n"), 3);
      EXPECT_EQ(e.at("args").at("pc"), "0x0E");
      EXPECT_EQ(names.at(e.at("tid").get<int>()), "interpreter");  // the starting thread's default name
    }
  }
  EXPECT_EQ(counts["step"], 3 * 700);
  EXPECT_EQ(counts["done"], 3);
  EXPECT_EQ(counts["main work"], 1);
  EXPECT_EQ(counts.count("before start") + counts.count("after stop"), 0u);
  for (int t = 0; t < 3; ++t) {
    bool found = false;
    for (const auto& [tid, name] : names) found = found || name == "worker " + std::to_string(t);
    EXPECT_TRUE(found) << "worker " << t;
  }
  std::filesystem::remove(path);
}

TEST(TraceTest, BadPathFailsAtStartAndOneTraceAtATime) {
  const Status bad = trace::start("/nonexistent-dir/sub/trace.json");
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("cannot open trace file '/nonexistent-dir/sub/trace.json'"), std::string::npos);
  EXPECT_FALSE(trace::enabled());
  const auto path = tempFile("twice");
  ASSERT_TRUE(trace::start(path.string(), true).isOk());
  EXPECT_TRUE(trace::opsEnabled());
  const Status again = trace::start(tempFile("other").string());
  EXPECT_FALSE(again.isOk());
  EXPECT_NE(again.message().find("already being written"), std::string::npos);
  ASSERT_TRUE(trace::stop().isOk());
  EXPECT_TRUE(trace::stop().isOk());  // nothing running: no-op
  // Only process_name: a thread appears with its first event (or its name while tracing).
  EXPECT_EQ(readJson(path).at("traceEvents").size(), 1u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace shapevm
