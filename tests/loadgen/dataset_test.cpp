// Datasets and traces: lengths read right; every malformed file names file:line.
#include <gtest/gtest.h>

#include "loadgen/dataset.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::write_temp;

/// The message of the runtime_error f throws, with the temp folder cut off.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    std::string m = e.what();
    const std::string dir = write_temp("x", "").substr(0, write_temp("x", "").size() - 1);
    if (m.rfind(dir, 0) == 0) m = m.substr(dir.size());
    return m;
  }
  return "(no error)";
}

TEST(Dataset, ShareGptCountsBytesOverFour) {
  const std::string path = write_temp("sg.json",
                                      "[\n"
                                      "  {\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"12345678\"},\n"
                                      "                                {\"from\": \"gpt\", \"value\": \"123456789\"}]},\n"
                                      "  {\"id\": \"b\", \"conversations\": [{\"from\": \"human\", \"value\": \"only a question\"}]},\n"
                                      "  {\"id\": \"c\", \"conversations\": [{\"from\": \"human\", \"value\": \"x\"},\n"
                                      "     {\"from\": \"gpt\", \"value\": \"y\"}, {\"from\": \"human\", \"value\": \"more\"}]}\n"
                                      "]\n");
  const Dataset d = load_dataset(path, DatasetFormat::sharegpt);
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.n_skipped, 1);  // one turn only
  EXPECT_EQ(d.entries[0].prompt_tokens, 2);  // 8 bytes
  EXPECT_EQ(d.entries[0].output_tokens, 3);  // 9 bytes → ceil(9/4)
  EXPECT_EQ(d.entries[0].line, 2);
  EXPECT_EQ(d.entries[1].prompt_tokens, 1);
  EXPECT_EQ(d.entries[1].line, 5);
  EXPECT_EQ(count_text_tokens(""), 0);
  EXPECT_EQ(count_text_tokens("abcd"), 1);
  EXPECT_EQ(count_text_tokens("abcde"), 2);
}

TEST(Dataset, ShareGptErrorsNameFileAndLine) {
  EXPECT_EQ(error_of([] { load_dataset("/no/such/file.json", DatasetFormat::sharegpt); }),
            "/no/such/file.json: cannot open file");
  EXPECT_EQ(error_of([] {
              load_dataset(write_temp("bad1.json", "[\n  {\"conversations\": []},\n  {\"conversations\": 5}\n]\n"),
                           DatasetFormat::sharegpt);
            }),
            "bad1.json:3: entry 1: \"conversations\" must be a list (got number)");
  EXPECT_EQ(error_of([] {
              load_dataset(write_temp("bad2.json", "[\n  {\"conversations\": [{\"from\": \"human\", \"value\": 3},\n"
                                                    "    {\"from\": \"gpt\", \"value\": \"b\"}]}\n]\n"),
                           DatasetFormat::sharegpt);
            }),
            "bad2.json:2: \"value\" must be a string (got number)");
  const std::string syntax = error_of([] {
    load_dataset(write_temp("bad3.json", "[\n  {\"conversations\": [}\n]\n"), DatasetFormat::sharegpt);
  });
  EXPECT_EQ(syntax.rfind("bad3.json:2: invalid JSON: parse error", 0), 0u) << syntax;
  EXPECT_EQ(error_of([] { load_dataset(write_temp("bad4.json", "{\"a\": 1}\n"), DatasetFormat::sharegpt); })
                .rfind("bad4.json:1: a ShareGPT dataset is a JSON list", 0),
            0u);
}

TEST(Dataset, JsonlTokensOrTexts) {
  const std::string path = write_temp("d.jsonl",
                                      "{\"prompt_tokens\": 10, \"output_tokens\": 20}\n"
                                      "\n"
                                      "{\"prompt\": \"abcdefgh\", \"output\": \"abc\"}\n");
  const Dataset d = load_dataset(path, DatasetFormat::jsonl);
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[0].prompt_tokens, 10);
  EXPECT_EQ(d.entries[0].output_tokens, 20);
  EXPECT_EQ(d.entries[1].prompt_tokens, 2);
  EXPECT_EQ(d.entries[1].output_tokens, 1);
  EXPECT_EQ(d.entries[1].line, 3);
  EXPECT_EQ(error_of([] {
              load_dataset(write_temp("e1.jsonl", "{\"prompt_tokens\": 1, \"output_tokens\": 1}\n{\"prompt_tokens\": 2}\n"),
                           DatasetFormat::jsonl);
            }),
            "e1.jsonl:2: missing \"output_tokens\"");
  EXPECT_EQ(error_of([] {
              load_dataset(write_temp("e2.jsonl", "{\"prompt_tokens\": 1.5, \"output_tokens\": 1}\n"), DatasetFormat::jsonl);
            }),
            "e2.jsonl:1: \"prompt_tokens\" must be a non-negative integer (got 1.5)");
  EXPECT_EQ(error_of([] { load_dataset(write_temp("e3.jsonl", "\n\n{oops\n"), DatasetFormat::jsonl); })
                .rfind("e3.jsonl:3: invalid JSON", 0),
            0u);
  EXPECT_EQ(error_of([] { load_dataset(write_temp("e4.jsonl", "{\"x\": 1}\n"), DatasetFormat::jsonl); })
                .rfind("e4.jsonl:1: expected {\"prompt_tokens\"", 0),
            0u);
}

TEST(Trace, TimestampsShiftedAndChecked) {
  const auto t = load_trace(write_temp("t.jsonl",
                                       "{\"timestamp\": 1000.5, \"prompt_tokens\": 5, \"output_tokens\": 6}\n"
                                       "{\"timestamp\": 1001.0, \"prompt_tokens\": 7, \"output_tokens\": 8}\n"));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0].timestamp_s, 0.0);
  EXPECT_DOUBLE_EQ(t[1].timestamp_s, 0.5);
  EXPECT_EQ(t[1].output_tokens, 8);
  EXPECT_EQ(error_of([] {
              load_trace(write_temp("t2.jsonl", "{\"timestamp\": 2, \"prompt_tokens\": 5, \"output_tokens\": 6}\n"
                                                "{\"timestamp\": 1, \"prompt_tokens\": 5, \"output_tokens\": 6}\n"));
            }),
            "t2.jsonl:2: timestamps must not decrease (1 after 2.0)");
  EXPECT_EQ(error_of([] { load_trace(write_temp("t3.jsonl", "{\"prompt_tokens\": 5, \"output_tokens\": 6}\n")); }),
            "t3.jsonl:1: missing \"timestamp\" (seconds)");
  EXPECT_EQ(error_of([] { load_trace(write_temp("t4.jsonl", "")); }),
            "t4.jsonl:1: empty trace (expected one JSON object a line)");
}

}  // namespace
}  // namespace servelab
