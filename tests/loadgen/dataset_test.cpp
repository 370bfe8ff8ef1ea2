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

TEST(Dataset, ShareGptLinesStayRightThroughTrickyStrings) {
  // Strings holding brackets, commas, escaped quotes and runs of backslashes must not end an
  // entry early; CRLF line ends and compact entries on one line count like any others.
  const std::string path = write_temp("tricky.json",
                                      "[{\"conversations\": [{\"value\": \"a ], { \\\" x\"}, {\"value\": \"\\\\\"}]},\r\n"
                                      "\r\n"
                                      "  {\"conversations\": [{\"value\": \"[[[\"}, {\"value\": \"}}\\\\\\\"\"}]}, {\"conversations\": [{\"value\": \"1\"}, {\"value\": \"2\"}]}\n"
                                      ",\n"
                                      "  {\"conversations\": [{\"value\": \"é東\"}, {\"value\": \"\\u00e9\"}]}\n"
                                      "]\n\n");
  const Dataset d = load_dataset(path, DatasetFormat::sharegpt);
  ASSERT_EQ(d.entries.size(), 4u);
  EXPECT_EQ(d.entries[0].line, 1);
  EXPECT_EQ(d.entries[0].prompt_tokens, 3);  // `a ], { " x` = 10 bytes
  EXPECT_EQ(d.entries[0].output_tokens, 1);  // one backslash
  EXPECT_EQ(d.entries[1].line, 3);
  EXPECT_EQ(d.entries[1].output_tokens, 1);  // `}}\"` = 4 bytes
  EXPECT_EQ(d.entries[2].line, 3);
  EXPECT_EQ(d.entries[3].line, 5);
  EXPECT_EQ(d.entries[3].prompt_tokens, 2);  // 2 + 3 UTF-8 bytes
  EXPECT_EQ(d.entries[3].output_tokens, 1);  // \u00e9 decodes to 2 bytes
}

TEST(Dataset, ShareGptManyEntriesKeepTheirLines) {
  // 3000 entries of three lines each, the last one broken: every line number is exact, and the
  // error names the last entry's line (lines are counted in the same pass, not rescanned).
  std::string text = "[\n";
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    text += "  {\"id\": " + std::to_string(i) + ",\n   \"conversations\": [{\"value\": \"" + std::string(1 + i % 9, 'p') +
            "\"}, {\"value\": \"oo\"}]\n  }" + (i + 1 < n ? ",\n" : "\n");
  }
  text += "]\n";
  const Dataset d = load_dataset(write_temp("many.json", text), DatasetFormat::sharegpt);
  ASSERT_EQ(d.entries.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(d.entries[static_cast<size_t>(i)].line, 2 + 3 * i) << i;
    ASSERT_EQ(d.entries[static_cast<size_t>(i)].prompt_tokens, (1 + i % 9 + 3) / 4) << i;
  }
  std::string bad = text;
  bad.replace(bad.rfind("\"oo\""), 4, "7");  // the last entry's reply becomes a number
  EXPECT_EQ(error_of([&] { load_dataset(write_temp("many_bad.json", bad), DatasetFormat::sharegpt); }),
            "many_bad.json:" + std::to_string(2 + 3 * (n - 1)) + ": \"value\" must be a string (got number)");
}

TEST(Dataset, ShareGptStructureErrorsNameTheirLine) {
  auto err = [](const std::string& name, const std::string& text) {
    return error_of([&] { load_dataset(write_temp(name, text), DatasetFormat::sharegpt); });
  };
  const std::string ok = "{\"conversations\": [{\"value\": \"a\"}, {\"value\": \"b\"}]}";
  EXPECT_EQ(err("comma.json", "[\n" + ok + ",\n]\n").rfind("comma.json:3: invalid JSON: parse error", 0), 0u);
  EXPECT_EQ(err("missing.json", "[\n" + ok + "\n" + ok + "]\n").rfind("missing.json:3: invalid JSON: parse error", 0), 0u);
  EXPECT_EQ(err("trailing.json", "[\n" + ok + "\n]\nextra\n").rfind("trailing.json:4: invalid JSON: parse error", 0), 0u);
  EXPECT_EQ(err("cut.json", "[\n" + ok + ",\n" + ok).rfind("cut.json:3: invalid JSON", 0), 0u);
  EXPECT_EQ(err("open.json", "[\n" + ok + ",\n{\"conversations\": \"unterminated\n").rfind("open.json:3: invalid JSON", 0), 0u);
  EXPECT_EQ(err("empty_list.json", " [ ]\n"), "empty_list.json:1: no usable entry (need a prompt turn followed by a reply)");
  EXPECT_EQ(err("empty.json", "").rfind("empty.json:1: invalid JSON", 0), 0u);
  EXPECT_EQ(err("scalar.json", "[\n" + ok + ",\n 5]\n"), "scalar.json:3: entry 1 must be an object (got number)");
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
