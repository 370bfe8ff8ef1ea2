#include <cstdio>
#include <fstream>

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

}  // namespace
}  // namespace servelab
