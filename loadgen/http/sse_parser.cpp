#include "loadgen/http/sse_parser.h"

#include <cstring>

namespace servelab::http_load {

namespace {

/// The first '\r' or '\n' in [p, end), else end. memchr for '\n' (SSE lines end with it in
/// practice), then for '\r' only within that line: two fast scans instead of a test per byte.
const char* line_end(const char* p, const char* end) {
  const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
  const char* stop = nl ? nl : end;
  const char* cr = static_cast<const char*>(std::memchr(p, '\r', static_cast<size_t>(stop - p)));
  return cr ? cr : stop;
}

}  // namespace

void SseParser::feed(std::string_view bytes) {
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (p == end) return;
  if (last_was_cr_ && *p == '\n' && line_.empty()) ++p;  // the '\n' of a "\r\n" split across feeds
  last_was_cr_ = false;
  while (p < end) {
    const char* e = line_end(p, end);
    if (e == end) {  // an unfinished line: keep it for the next feed
      line_.append(p, static_cast<size_t>(end - p));
      return;
    }
    if (line_.empty()) {
      line_done(std::string_view(p, static_cast<size_t>(e - p)));  // whole line in this feed: no copy
    } else {
      line_.append(p, static_cast<size_t>(e - p));
      line_done(line_);
      line_.clear();
    }
    p = e + 1;
    if (*e == '\r') {
      if (p == end) last_was_cr_ = true;  // a '\n' may open the next feed
      else if (*p == '\n') ++p;
    }
  }
}

void SseParser::line_done(std::string_view line) {
  if (line.empty()) {  // blank line: dispatch
    if (has_data_) on_event_(data_);
    data_.clear();
    has_data_ = false;
  } else if (line[0] != ':') {
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value);
      has_data_ = true;
    }
  }
}

void SseParser::finish() {
  if (!line_.empty()) {
    line_done(line_);
    line_.clear();
  }
  last_was_cr_ = false;
  if (has_data_) on_event_(data_);
  data_.clear();
  has_data_ = false;
}

}  // namespace servelab::http_load
