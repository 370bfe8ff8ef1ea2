#include "engine/model/tokenizer_unicode.h"

#include <algorithm>
#include <array>
#include <vector>

#include "engine/model/unicode_tables.h"

namespace servelab::unicode {
namespace {

using namespace tables;

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Invalid input bytes travel through NFC as private values above the Unicode range.
constexpr char32_t kRawByteBase = 0x110000;

template <typename Row>
const Row* find_range(const Row* rows, size_t n, char32_t cp) {
  const Row* end = rows + n;
  const Row* it = std::upper_bound(rows, end, cp, [](char32_t c, const Row& r) { return c < r.first; });
  if (it == rows) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

std::array<CharClass, 256> make_latin1_classes() {
  std::array<CharClass, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const ClassRange* r = find_range(kClassRanges, kClassRangesSize, char32_t(c));
    t[c] = r ? (r->klass == 1 ? CharClass::letter : CharClass::number) : CharClass::other;
  }
  for (int c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0}) t[c] = CharClass::space;
  return t;
}

bool is_space_above_latin1(char32_t cp) {
  return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = int(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionsSize;
  const Decomposition* it =
      std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionsSize;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto key) {
    return c.first != key.first ? c.first < key.first : c.second < key.second;
  });
  return it != end && it->first == a && it->second == b ? it->cp : 0;
}

bool is_stable(char32_t cp) {
  return cp < 0x300 || cp == kInvalid || !find_range(kNfcMaybeRanges, kNfcMaybeRangesSize, cp);
}

uint8_t ccc_of(char32_t cp) { return cp >= kRawByteBase ? 0 : combining_class(cp); }

// The full algorithm (decompose, reorder, compose) on a chunk.
std::string nfc_full(std::string_view text) {
  // 1. Full canonical decomposition; invalid bytes become private starters.
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    int len;
    const char32_t cp = decode_at(text, i, &len);
    if (cp == kInvalid)
      for (int k = 0; k < len; ++k) cps.push_back(kRawByteBase + static_cast<unsigned char>(text[i + k]));
    else
      decompose(cp, cps);
    i += len;
  }
  // 2. Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // 3. Canonical composition: each character joins the last starter unless blocked.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  long starter = -1;  // index in out of the last starter
  int last_ccc = -1;  // ccc of the last character appended after that starter (-1: none)
  for (const char32_t cp : cps) {
    const int ccc = ccc_of(cp);
    // Blocked: something between the starter and cp is a starter or has a class >= cp's.
    const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
    if (starter >= 0 && !blocked) {
      if (const char32_t c = compose_pair(out[starter], cp)) {
        out[starter] = c;
        continue;
      }
    }
    if (ccc == 0) {
      starter = long(out.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (const char32_t cp : out) {
    if (cp >= kRawByteBase) result += char(cp - kRawByteBase);
    else append_utf8(result, cp);
  }
  return result;
}

}  // namespace

char32_t decode_at(std::string_view text, size_t pos, int* len) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  *len = 1;
  if (b0 < 0x80) return b0;
  int need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF) need = 2, cp = b0 & 0x0F, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  else if (b0 >= 0xF0 && b0 <= 0xF4) need = 3, cp = b0 & 0x07, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  else return kInvalid;
  for (int k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) return kInvalid;
    const unsigned char b = byte(pos + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return kInvalid;
    cp = (cp << 6) | (b & 0x3F);
    *len = k + 1;
  }
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    int len;
    const char32_t cp = decode_at(text, i, &len);
    if (cp == kInvalid) out += "\xEF\xBF\xBD";
    else out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

CharClass char_class(char32_t cp) {
  static const std::array<CharClass, 256> latin1 = make_latin1_classes();
  if (cp < 256) return latin1[cp];
  if (cp == kInvalid) return CharClass::other;
  if (is_space_above_latin1(cp)) return CharClass::space;
  const ClassRange* r = find_range(kClassRanges, kClassRangesSize, cp);
  return r ? (r->klass == 1 ? CharClass::letter : CharClass::number) : CharClass::other;
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRange* r = find_range(kCombiningRanges, kCombiningRangesSize, cp);
  return r ? r->ccc : 0;
}

bool nfc_quick_check(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0xCC) {  // below U+0300: always a stable starter
      i += static_cast<unsigned char>(text[i]) < 0x80 ? 1 : 2;
      continue;
    }
    int len;
    if (!is_stable(decode_at(text, i, &len))) return false;
    i += len;
  }
  return true;
}

// Only the chunks around unstable code points run the full algorithm: a stable starter neither
// reorders nor composes with anything across it, so it cuts the text into independent parts.
std::string nfc(std::string_view text) {
  if (nfc_quick_check(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  size_t last_stable = std::string_view::npos, last_stable_out = 0;  // the stable char just copied
  for (size_t i = 0; i < text.size();) {
    int len;
    if (is_stable(decode_at(text, i, &len))) {
      last_stable = i, last_stable_out = out.size();
      out.append(text.substr(i, len));
      i += len;
      continue;
    }
    const size_t begin = last_stable == std::string_view::npos ? i : last_stable;
    if (last_stable != std::string_view::npos) out.resize(last_stable_out);
    size_t end = i + len;
    while (end < text.size() && !is_stable(decode_at(text, end, &len))) end += len;
    out += nfc_full(text.substr(begin, end - begin));
    last_stable = std::string_view::npos;
    i = end;
  }
  return out;
}

}  // namespace servelab::unicode
