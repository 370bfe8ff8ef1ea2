#include <cstdio>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loadgen/records/record.h"

namespace servelab {
namespace {

TEST(Record, RoundTripsThroughJsonLine) {
  RequestRecord r;
  r.run = "continuous-paged@2";
  r.id = 7;
  r.arrival_s = 1.25;
  r.sent_s = 1.2501;
  r.first_token_s = 1.5;
  r.token_times_s = {1.5, 1.6, 1.75};
  r.end_s = 1.75;
  r.prompt_tokens = 12;
  r.output_tokens = 3;
  r.preemptions = 1;
  const auto back = nlohmann::json::parse(record_line(r)).get<RequestRecord>();
  EXPECT_EQ(back.run, r.run);
  EXPECT_EQ(back.id, 7u);
  EXPECT_DOUBLE_EQ(back.sent_s, 1.2501);
  EXPECT_EQ(back.token_times_s, r.token_times_s);
  EXPECT_EQ(back.status, RecordStatus::ok);
  EXPECT_TRUE(back.error.empty());
  EXPECT_EQ(back.preemptions, 1);
}

TEST(Record, MissingTimesAreNullAndErrorsKeepTheirMessage) {
  RequestRecord r;
  r.run = "x";
  r.status = RecordStatus::rejected;
  r.error = "prompt longer than max_model_len";
  const auto j = nlohmann::json::parse(record_line(r));
  EXPECT_TRUE(j["first_token_s"].is_null());
  EXPECT_EQ(j["status"], "rejected");
  EXPECT_EQ(j.get<RequestRecord>().error, r.error);
}

// Issue 6 item 2: scheduled_s (first admitted to a batch) round-trips; absent or null reads as -1
// so records written before the field existed still load.
TEST(Record, ScheduledTimeRoundTripsAndDefaultsToMinusOne) {
  RequestRecord r;
  r.run = "x";
  r.arrival_s = 1.0;
  r.scheduled_s = 1.125;
  nlohmann::json j = nlohmann::json::parse(record_line(r));
  EXPECT_EQ(j["scheduled_s"], 1.125);
  EXPECT_DOUBLE_EQ(j.get<RequestRecord>().scheduled_s, 1.125);
  r.scheduled_s = -1.0;  // never scheduled
  j = nlohmann::json::parse(record_line(r));
  EXPECT_TRUE(j["scheduled_s"].is_null());
  EXPECT_DOUBLE_EQ(j.get<RequestRecord>().scheduled_s, -1.0);
  j.erase("scheduled_s");  // an older record
  EXPECT_DOUBLE_EQ(j.get<RequestRecord>().scheduled_s, -1.0);
}

TEST(Record, BadLineNamesFileAndLine) {
  const std::string path = testing::TempDir() + "bad_records.jsonl";
  {
    std::ofstream out(path);
    RequestRecord r;
    r.run = "x";
    out << record_line(r) << "{\"run\": \"x\"}\n";
  }
  try {
    read_records(path);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_records.jsonl:2:"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(Record, LineIsExactlyNlohmannsDump) {
  // record_line builds the line by hand (the HTTP driver's hot path): same bytes as the general
  // serializer, numbers included (shortest round-trip digits, integral values as "2.0").
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 5000.0);
  const double specials[] = {0.0, 2.0, 1e-7, 0.1, 1.0 / 3.0, 123456789.125, 1e21, 4.9e-324, -0.5};
  for (int k = 0; k < 200; ++k) {
    RequestRecord r;
    r.run = k % 2 ? "continuous-paged@2000#1" : "x";
    r.id = k % 3 ? static_cast<uint64_t>(k) : UINT64_MAX - k;
    r.arrival_s = k < 9 ? specials[k] : u(rng);
    r.sent_s = r.arrival_s + u(rng) * 1e-6;
    r.scheduled_s = k % 4 == 0 ? -1.0 : u(rng);
    r.first_token_s = k % 5 == 0 ? -1.0 : u(rng);
    for (int i = 0; i < k % 70; ++i) r.token_times_s.push_back(i % 9 == 8 ? specials[i % 9] : u(rng));
    r.end_s = k % 7 == 0 ? -1.0 : u(rng);
    r.prompt_tokens = k * 13 - 100;
    r.output_tokens = k;
    r.preemptions = k % 3;
    r.status = static_cast<RecordStatus>(k % 4);
    r.error = k % 3 == 0 ? "" : "HTTP 500: boom (timeout after 5 s)";
    r.warmup = k % 6 == 0;
    ASSERT_EQ(record_line(r), nlohmann::json(r).dump() + "\n") << "record " << k;
  }
  RequestRecord e;  // strings to escape take the general path
  e.run = "r\"1";
  e.error = "malformed chunk: {\"x\n\xE2\x82\xAC";
  EXPECT_EQ(record_line(e), nlohmann::json(e).dump() + "\n");
  EXPECT_EQ(nlohmann::json::parse(record_line(e)).get<RequestRecord>().error, e.error);
}

}  // namespace
}  // namespace servelab
