#include "analysis/text_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace servelab::analysis {
namespace {

std::string printf_double(const char* fmt, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

/// Display width of UTF-8 text (counts code points, not bytes).
std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

std::string format_number(double x) {
  if (std::isnan(x)) return "-";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  const double a = std::fabs(x);
  if (a >= 1000.0) return printf_double("%.0f", x);
  if (a >= 100.0) return printf_double("%.1f", x);
  if (a >= 1.0) return printf_double("%.2f", x);
  if (a == 0.0) return "0";
  return printf_double("%.3f", x);
}

std::string format_plain(double x) {
  if (std::isnan(x)) return "-";
  return printf_double("%g", x);
}

std::string format_change_pct(double pct) {
  if (std::isnan(pct)) return "n/a";
  if (std::isinf(pct)) return pct > 0 ? "+inf%" : "-inf%";
  return printf_double("%+.1f%%", pct);
}

std::string format_share(double share) {
  if (std::isnan(share)) return "-";
  return printf_double("%.1f%%", share * 100.0);
}

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void TextTable::print(std::ostream& out) const {
  std::vector<std::size_t> width(headers_.size(), 0);
  for (std::size_t c = 0; c < headers_.size(); ++c) width[c] = display_width(headers_[c]);
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], display_width(row[c]));
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - display_width(row[c]), ' ');
      if (c > 0) line += "  ";
      line += c == 0 ? row[c] + pad : pad + row[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print_row(headers_);
  std::size_t total = 0;
  for (std::size_t c = 0; c < width.size(); ++c) total += width[c] + (c > 0 ? 2 : 0);
  out << std::string(total, '-') << "\n";
  for (const auto& row : rows_) print_row(row);
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace servelab::analysis
