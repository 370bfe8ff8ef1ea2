// A strategy's storage-format accuracy in runs.json and summary.json (round trips, byte for byte),
// malformed entries refused naming the key, and the report's storage-formats table: the reference
// strategy, a measured one, a noted one; no table when no run carries an accuracy.
#include "analysis/format_accuracy.h"

#include <gtest/gtest.h>

#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/summary.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace format_accuracy_test {

FormatAccuracy measured() {
  FormatAccuracy a;
  a.weights = "fp8 (per-tensor weights, per-tensor dynamic activations)";
  a.kv_cache_dtype = "fp8";
  a.reference = "bf16 weights and K/V on cuda";
  a.positions = 1024;
  a.top1_agreement = 0.9873046875;
  a.mean_kl = 1.2345678e-5;
  a.max_kl = 3.5e-4;
  a.max_logit_error = 0.75;
  a.rel_logit_error = 0.021;
  a.linear_bytes_per_weight = 1.0130813953488371;
  return a;
}

TEST(FormatAccuracy, RoundTripsMeasuredAndNoted) {
  const FormatAccuracy a = measured();
  const nlohmann::ordered_json j = a;
  EXPECT_EQ(j["mean_kl"].get<double>(), 1.2345678e-5);  // not rounded to 6 decimals
  const FormatAccuracy back = j.get<FormatAccuracy>();
  EXPECT_EQ(nlohmann::ordered_json(back).dump(), j.dump());
  EXPECT_TRUE(back.measured());

  FormatAccuracy n;
  n.weights = "int4_awq (group 128)";
  n.kv_cache_dtype = "auto";
  n.linear_bytes_per_weight = 0.52;
  n.note = "the sim has no weights";
  const nlohmann::ordered_json jn = n;
  EXPECT_FALSE(jn.contains("top1_agreement"));
  const FormatAccuracy nb = jn.get<FormatAccuracy>();
  EXPECT_FALSE(nb.measured());
  EXPECT_EQ(nb.note, n.note);
  EXPECT_EQ(nb.linear_bytes_per_weight, 0.52);
}

TEST(FormatAccuracy, AMissingKeyIsNamed) {
  nlohmann::ordered_json j = measured();
  j.erase("mean_kl");
  try {
    (void)j.get<FormatAccuracy>();
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mean_kl"), std::string::npos) << e.what();
  }
  RunInfo info = testing_data::run_info("continuous", "paged", 2.0, 20);
  nlohmann::ordered_json r = info;
  r["accuracy"] = nlohmann::ordered_json::array();
  EXPECT_THROW((void)r.get<RunInfo>(), std::invalid_argument);
}

Summary three_strategies() {
  std::vector<RunInfo> infos;
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  const char* names[] = {"bf16", "fp8", "int4"};
  for (int i = 0; i < 3; ++i) {
    RunInfo info = testing_data::run_info("continuous", "paged", 2.0, 20);
    info.strategy = names[i];
    info.label = std::string(names[i]) + "@2";
    info.backend = "cuda";
    if (i == 1) info.accuracy = measured();
    if (i == 2) {
      info.accuracy = FormatAccuracy{};
      info.accuracy->weights = "int4_awq (group 128)";
      info.accuracy->kv_cache_dtype = "auto";
      info.accuracy->linear_bytes_per_weight = 0.52;
      info.accuracy->note = "a checkpoint";
    }
    testing_data::append_run({info, 0.05, 0.02}, 20, 3 + i, records, steps);
    infos.push_back(info);
  }
  return build_summary(ScenarioInfo{"formats", "f.yaml", 1, {}}, Environment{}, SloSpec{}, infos, records, steps);
}

TEST(FormatAccuracy, SummaryCarriesItAndReadsBackTheSameBytes) {
  const Summary s = three_strategies();
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_FALSE(j["runs"][0].contains("accuracy"));
  EXPECT_EQ(j["runs"][1]["accuracy"]["positions"], 1024);
  EXPECT_EQ(j["runs"][2]["accuracy"]["note"], "a checkpoint");
  const Summary back = j.get<Summary>();
  EXPECT_EQ(summary_text(back), summary_text(s));
}

TEST(FormatAccuracy, ReportTableShowsReferenceMeasuredAndNoted) {
  const Summary s = three_strategies();
  const TextRows t = formats_table(s);
  ASSERT_EQ(t.rows.size(), 3u);
  ASSERT_EQ(t.header.size(), t.rows[0].size());
  EXPECT_EQ(t.rows[0][0], "bf16");
  EXPECT_EQ(t.rows[0][7], "reference");
  EXPECT_EQ(t.rows[1][2], "fp8");
  EXPECT_EQ(t.rows[1][5], "1.01");
  EXPECT_EQ(t.rows[1][6], "1024");
  EXPECT_EQ(t.rows[1][7], "98.7%");
  EXPECT_EQ(t.rows[2][7], "not measured: a checkpoint");
  const std::string md = report_markdown(s, {}, {}, {});
  EXPECT_NE(md.find("## Storage formats"), std::string::npos);
  Summary plain = s;
  for (auto& r : plain.runs) r.info.accuracy.reset();
  EXPECT_TRUE(formats_table(plain).empty());
  EXPECT_EQ(report_markdown(plain, {}, {}, {}).find("Storage formats"), std::string::npos);
}

}  // namespace format_accuracy_test
}  // namespace servelab::analysis
