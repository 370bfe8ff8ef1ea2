#include "analysis/percentiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace servelab::analysis {
namespace {

// Expected values worked by hand with h = (n − 1)·q/100, p = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).

TEST(Percentiles, LinearBetweenClosestRanksOnFourSamples) {
  const std::vector<double> x = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 50), 2.5);   // h = 1.5
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 90), 3.7);   // h = 2.7
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 25), 1.75);  // h = 0.75
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 100), 4.0);
}

TEST(Percentiles, TenSamplesHighTail) {
  std::vector<double> x;
  for (int i = 1; i <= 10; ++i) x.push_back(i);
  EXPECT_NEAR(percentile_of_sorted(x, 99), 9.91, 1e-12);     // h = 8.91
  EXPECT_NEAR(percentile_of_sorted(x, 99.9), 9.991, 1e-12);  // h = 8.991
  EXPECT_NEAR(percentile_of_sorted(x, 95), 9.55, 1e-12);     // h = 8.55
}

TEST(Percentiles, TwoSamplesAndOneSample) {
  EXPECT_DOUBLE_EQ(percentile_of_sorted(std::vector<double>{0, 10}, 95), 9.5);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(std::vector<double>{7}, 99.9), 7.0);
}

TEST(Percentiles, SummarizeSortsAndFillsEveryField) {
  const Distribution d = summarize({30, 10, 20, 40, 0});  // sorted 0 10 20 30 40
  EXPECT_EQ(d.n, 5u);
  EXPECT_DOUBLE_EQ(d.mean, 20.0);
  EXPECT_DOUBLE_EQ(d.p50, 20.0);
  EXPECT_NEAR(d.p90, 36.0, 1e-12);    // h = 3.6
  EXPECT_NEAR(d.p95, 38.0, 1e-12);    // h = 3.8
  EXPECT_NEAR(d.p99, 39.6, 1e-12);    // h = 3.96
  EXPECT_NEAR(d.p999, 39.96, 1e-12);  // h = 3.996
  EXPECT_DOUBLE_EQ(d.max, 40.0);
}

TEST(Percentiles, EmptyIsNanAndNullNotZero) {
  const Distribution d = summarize({});
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(std::isnan(d.p50));
  const nlohmann::ordered_json j = d;
  EXPECT_TRUE(j["p50"].is_null());
  EXPECT_TRUE(j["max"].is_null());
  EXPECT_EQ(j.get<Distribution>().n, 0u);
}

TEST(Percentiles, RejectsEmptyInputAndBadQ) {
  EXPECT_THROW(percentile_of_sorted(std::vector<double>{}, 50), std::invalid_argument);
  EXPECT_THROW(percentile_of_sorted(std::vector<double>{1, 2}, 101), std::invalid_argument);
  EXPECT_THROW(percentile_of_sorted(std::vector<double>{1, 2}, -1), std::invalid_argument);
}

TEST(Percentiles, JsonHasExactlyTheDesignKeysInOrder) {
  const nlohmann::ordered_json j = summarize({1.0, 2.0});
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"mean", "p50", "p90", "p95", "p99", "p999", "max"}));
  EXPECT_EQ(j["p50"].get<double>(), 1.5);
}

TEST(Percentiles, JsonRoundsToSixDecimals) {
  const nlohmann::ordered_json j = summarize({0.1 + 0.2});  // 0.30000000000000004
  EXPECT_EQ(j.dump(), R"({"mean":0.3,"p50":0.3,"p90":0.3,"p95":0.3,"p99":0.3,"p999":0.3,"max":0.3})");
}

}  // namespace
}  // namespace servelab::analysis
