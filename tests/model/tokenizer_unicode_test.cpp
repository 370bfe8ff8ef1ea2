// UTF-8 stepping, character classes and NFC against known answers.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/tokenizer_unicode.h"

namespace servelab::unicode {
namespace {

TEST(Unicode, DecodesAndFlagsInvalidUtf8) {
  int len;
  EXPECT_EQ(decode_at("é", 0, &len), U'é');
  EXPECT_EQ(len, 2);
  EXPECT_EQ(decode_at("🙂", 0, &len), U'🙂');
  EXPECT_EQ(len, 4);
  EXPECT_EQ(decode_at("\xC0\xAF", 0, &len), kInvalid);  // overlong
  EXPECT_EQ(len, 1);
  EXPECT_EQ(decode_at("\xED\xA0\x80", 0, &len), kInvalid);  // surrogate
  EXPECT_EQ(len, 1);
  EXPECT_EQ(decode_at("\xE4\xB8", 0, &len), kInvalid);  // truncated: one unit of two bytes
  EXPECT_EQ(len, 2);
  EXPECT_EQ(to_valid_utf8("a\xE4\xB8" "b\xFF"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  std::string s;
  for (char32_t cp : {U'a', U'ß', U'世', U'🙂'}) append_utf8(s, cp);
  EXPECT_EQ(s, "aß世🙂");
}

TEST(Unicode, Classes) {
  EXPECT_EQ(char_class(U'a'), CharClass::letter);
  EXPECT_EQ(char_class(U'É'), CharClass::letter);
  EXPECT_EQ(char_class(U'世'), CharClass::letter);
  EXPECT_EQ(char_class(U'ا'), CharClass::letter);
  EXPECT_EQ(char_class(U'7'), CharClass::number);
  EXPECT_EQ(char_class(U'½'), CharClass::number);   // No
  EXPECT_EQ(char_class(U'Ⅻ'), CharClass::number);  // Nl
  EXPECT_EQ(char_class(U'٣'), CharClass::number);
  EXPECT_EQ(char_class(U' '), CharClass::space);
  EXPECT_EQ(char_class(0x3000), CharClass::space);
  EXPECT_EQ(char_class(0xA0), CharClass::space);
  EXPECT_EQ(char_class(0x85), CharClass::space);
  EXPECT_EQ(char_class(0xFEFF), CharClass::other);  // not White_Space
  EXPECT_EQ(char_class(U'!'), CharClass::other);
  EXPECT_EQ(char_class(U'🙂'), CharClass::other);
  EXPECT_EQ(char_class(0x0301), CharClass::other);  // a combining mark is not a letter
  EXPECT_EQ(char_class(kInvalid), CharClass::other);
  EXPECT_EQ(combining_class(0x0301), 230);
  EXPECT_EQ(combining_class(0x0323), 220);
  EXPECT_EQ(combining_class(U'a'), 0);
}

TEST(Unicode, Nfc) {
  EXPECT_TRUE(nfc_quick_check("plain ascii and é and 世界"));
  EXPECT_FALSE(nfc_quick_check("e\u0301"));
  EXPECT_EQ(nfc("e\u0301"), "é");
  EXPECT_EQ(nfc("Ame\u0301lie"), "Amélie");
  // Reordering: dot below (220) sorts before acute (230); then both compose as far as they can.
  EXPECT_EQ(nfc("s\u0307\u0323"), "\u1E69");      // ṩ
  EXPECT_EQ(nfc("s\u0323\u0307"), "\u1E69");
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00E1\u0301");  // the second acute is blocked
  EXPECT_EQ(nfc("\u212B"), "\u00C5");             // singleton: Angstrom sign -> A ring
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");       // excluded from composition
  EXPECT_EQ(nfc("\u1100\u1161\u11A8"), "\uAC01");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("\uAC00\u11A8"), "\uAC01");        // LV + T
  EXPECT_EQ(nfc("\u0B47\u0B3E"), "\u0B4B");        // two starters compose
  EXPECT_EQ(nfc("\u0301e"), "\u0301e");            // a leading mark has nothing to join
  EXPECT_EQ(nfc("x\xFF\u0301y"), "x\xFF\u0301y");  // an invalid byte is a starter, kept as is
  EXPECT_EQ(nfc("ệ"), "ệ");
  EXPECT_EQ(nfc("e\u0323\u0302"), "ệ");
}

// Seeded random strings dense in marks, Hangul jamo and composition exclusions, with Python's
// unicodedata.normalize("NFC") of each (scripts/gen-unicode-tables.py --nfc-cases).
TEST(Unicode, NfcMatchesPythonOnRandomCases) {
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/tokenizer/nfc_cases.jsonl");
  ASSERT_TRUE(in) << "tests/data/tokenizer/nfc_cases.jsonl missing";
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"], expected = j["nfc"];
    EXPECT_EQ(nfc(text), expected) << line;
    EXPECT_EQ(nfc("ab " + text + " cd"), "ab " + expected + " cd") << line;  // stable context around it
    EXPECT_EQ(nfc(expected), expected) << line;
    ++n;
  }
  EXPECT_EQ(n, 400);
}

}  // namespace
}  // namespace servelab::unicode
