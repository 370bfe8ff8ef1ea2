// Code point sets and their UTF-8 encodings as byte automata.
#include "engine/grammar/codepoints.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

namespace servelab::grammar {

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) std::swap(lo, hi);
  if (hi > kMaxCodepoint) hi = kMaxCodepoint;
  if (lo > hi) return;
  ranges_.push_back({lo, hi});
  normal_ = false;
}

void CodepointSet::add(const CodepointSet& other) {
  for (const Range& r : other.ranges()) add(r.lo, r.hi);
}

const std::vector<CodepointSet::Range>& CodepointSet::ranges() const {
  if (normal_) return ranges_;
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> merged;
  for (const Range& r : ranges_) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, r.hi);
    else merged.push_back(r);
  }
  ranges_ = std::move(merged);
  normal_ = true;
  return ranges_;
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const Range& r : ranges()) {
    if (r.lo > next) out.add(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.add(next, kMaxCodepoint);
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

using ByteRanges = std::vector<std::pair<unsigned char, unsigned char>>;

// Splits [lo, hi] until each piece's first and last code point share their encoded length and every
// byte position ranges freely over what lies between, so a piece is one sequence of byte ranges.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not characters
    if (lo < 0xD800) split_utf8(lo, 0xD7FF, out);
    if (hi > 0xDFFF) split_utf8(0xE000, hi, out);
    return;
  }
  for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= bound && hi > bound) {
      split_utf8(lo, bound, out);
      split_utf8(bound + 1, hi, out);
      return;
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  const size_t n = a.size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteRanges seq;
  for (size_t i = 0; i < n; ++i) seq.push_back({static_cast<unsigned char>(a[i]), static_cast<unsigned char>(b[i])});
  out.push_back(std::move(seq));
}

int byte_range(Grammar& g, unsigned char lo, unsigned char hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return g.bytes(s);
}

// The multi-byte (>= 0x80) part of a set as alternatives of byte-range sequences.
void add_multibyte(Grammar& g, const CodepointSet& set, std::vector<int>& options) {
  std::vector<ByteRanges> pieces;
  for (const CodepointSet::Range& r : set.ranges()) {
    if (r.hi < 0x80) continue;
    split_utf8(std::max<uint32_t>(r.lo, 0x80), r.hi, pieces);
  }
  for (const ByteRanges& p : pieces) {
    std::vector<int> parts;
    for (auto [lo, hi] : p) parts.push_back(byte_range(g, lo, hi));
    options.push_back(g.seq(std::move(parts)));
  }
}

}  // namespace

int utf8_expr(Grammar& g, const CodepointSet& set) {
  ByteSet ascii;
  for (const CodepointSet::Range& r : set.ranges())
    for (uint32_t c = r.lo; c <= r.hi && c < 0x80; ++c) ascii.set(c);
  std::vector<int> options;
  if (ascii.any()) options.push_back(g.bytes(ascii));
  add_multibyte(g, set, options);
  return g.alt(std::move(options));
}

int json_char_expr(Grammar& g, const CodepointSet& set) {
  ByteSet plain;
  std::vector<int> options;
  for (const CodepointSet::Range& r : set.ranges()) {
    for (uint32_t c = r.lo; c <= r.hi && c < 0x80; ++c) {
      if (c == '"') options.push_back(g.literal("\\\""));
      else if (c == '\\') options.push_back(g.literal("\\\\"));
      else if (c >= 0x20) plain.set(c);
      else {
        static constexpr std::array<std::pair<uint32_t, const char*>, 5> kShort = {
            {{'\b', "\\b"}, {'\f', "\\f"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}}};
        const char* esc = nullptr;
        for (auto [cc, e] : kShort)
          if (cc == c) esc = e;
        if (esc) {
          options.push_back(g.literal(esc));
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          options.push_back(g.literal(buf));
        }
      }
    }
  }
  if (plain.any()) options.push_back(g.bytes(plain));
  add_multibyte(g, set, options);
  return g.alt(std::move(options));
}

}  // namespace servelab::grammar
