#include "loadgen/http/sse_parser.h"

namespace servelab::http_load {

void SseParser::feed(std::string_view bytes) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\r' && c != '\n') continue;
    if (c == '\n' && last_was_cr_ && i == start && line_.empty()) {  // the '\n' of a "\r\n" split or not
      last_was_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.data() + start, i - start);
    line_done();
    last_was_cr_ = c == '\r';
    start = i + 1;
  }
  if (start < bytes.size()) {
    line_.append(bytes.data() + start, bytes.size() - start);
    last_was_cr_ = false;
  }
}

void SseParser::line_done() {
  std::string_view line = line_;
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
  line_.clear();
}

void SseParser::finish() {
  if (!line_.empty()) line_done();
  if (has_data_) on_event_(data_);
  data_.clear();
  has_data_ = false;
}

}  // namespace servelab::http_load
