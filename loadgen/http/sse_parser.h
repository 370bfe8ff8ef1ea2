#pragma once
// SseParser: Server-Sent Events (the WHATWG event-stream format) fed bytes as they arrive, split
// anywhere: mid-line, mid-"\r\n", mid-UTF-8. Emits one event per blank line with its joined
// `data:` lines; comments (": ping") and other fields are skipped.
#include <functional>
#include <string>
#include <string_view>

namespace servelab::http_load {

class SseParser {
 public:
  /// Called with each event's data (lines joined with '\n'); events without data are skipped.
  using OnEvent = std::function<void(std::string_view data)>;
  explicit SseParser(OnEvent on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  /// End of stream: an event not closed by a blank line is dispatched (servers that end with
  /// "data: [DONE]\n" and close).
  void finish();
  /// Bytes of the current unfinished line (bounded by callers against abuse).
  size_t buffered() const { return line_.size() + data_.size(); }

 private:
  /// One line without its terminator (a view into the input or into line_).
  void line_done(std::string_view line);

  OnEvent on_event_;
  std::string line_;  ///< an unfinished line carried over from the previous feed
  std::string data_;
  bool has_data_ = false;
  bool last_was_cr_ = false;  ///< a '\r' ended the last line: a following '\n' belongs to it
};

}  // namespace servelab::http_load
