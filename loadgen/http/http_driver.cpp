#include "loadgen/http/http_driver.h"

#include "engine/lora/lora_adapter.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <nlohmann/json.hpp>

#include "loadgen/http/openai_chunk.h"
#include "loadgen/http/request_body.h"
#include "loadgen/http/sse_parser.h"

namespace servelab::http_load {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;
constexpr size_t kMaxSseLine = 16 << 20;

/// Thousands of streams need thousands of descriptors.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/// The message of an OpenAI-style error body, else the body's start.
std::string error_message(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    auto e = j.find("error");
    if (e != j.end() && e->is_object() && e->contains("message") && (*e)["message"].is_string())
      return (*e)["message"].get<std::string>();
    if (e != j.end() && e->is_string()) return e->get<std::string>();
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  }
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

struct Conn {
  explicit Conn(asio::io_context& ioc) : socket(ioc) { buffer.reserve(64 * 1024); }  // few, large reads
  tcp::socket socket;
  beast::flat_buffer buffer;  ///< bytes read past one response stay for the next
  char body_buf[16384];       ///< the response body's bytes, decoded from chunked encoding
};

class Driver;

/// One request in flight.
struct Call : std::enable_shared_from_this<Call> {
  explicit Call(Driver& d) : driver(d), sse([this](std::string_view e) { on_event(e); }) {}
  Driver& driver;
  Request request;
  RequestRecord rec;
  size_t replica = 0;
  std::string wire;  ///< the HTTP request bytes
  std::shared_ptr<Conn> conn;
  bool reused = false;
  bool retried = false;
  bool done = false;
  bool got_response_bytes = false;
  Clock::time_point deadline;  ///< the per-request timeout
  std::optional<http::response_parser<http::buffer_body>> parser;
  int status = 0;
  std::string error_body;
  SseParser sse;
  double chunk_time = 0.0;  ///< when the bytes being parsed arrived
  bool got_done = false;
  std::optional<std::string> finish_reason;
  std::optional<int> usage_prompt, usage_completion;
  int n_chunks = 0;
  bool keep_text = false;  ///< structured output: the output is validated, so it is kept
  std::string raw_text;    ///< its JSON string contents as streamed (escapes kept)

  void on_event(std::string_view data);
};

class Driver {
 public:
  Driver(RequestSource& source, const HttpDriverOptions& opt, const std::string& label, const RecordSinks& sinks,
         const std::function<bool(uint64_t)>& is_warmup, const std::atomic<bool>* stop)
      : source_(source), opt_(opt), label_(label), sinks_(sinks), is_warmup_(is_warmup), stop_(stop),
        send_timer_(ioc_), stop_timer_(ioc_), timeout_timer_(ioc_) {
    for (const auto& url : opt.target.urls) endpoints_.push_back(parse_endpoint(url));
    if (endpoints_.empty()) throw std::invalid_argument("target.url is required");
    resolved_.resize(endpoints_.size());
    resolve_errors_.resize(endpoints_.size());
    idle_.resize(endpoints_.size());
    outstanding_.assign(endpoints_.size(), 0);
    result_.replicas.resize(endpoints_.size());
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      result_.replicas[i].url = endpoints_[i].url;
      tcp::resolver resolver(ioc_);
      boost::system::error_code ec;
      resolved_[i] = resolver.resolve(endpoints_[i].host, endpoints_[i].port, ec);
      if (ec) resolve_errors_[i] = "resolve " + endpoints_[i].host + ": " + ec.message();
    }
  }

  HttpDriveStats run() {
    raise_fd_limit();
    t0_ = Clock::now();
    pump();
    if (stop_) watch_stop();
    ioc_.run();
    result_.stats.stopped = stopped_;
    return result_;
  }

  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  /// Sends what is due now, before the caller's work: the send timer's handler would otherwise
  /// wait behind every read completion of the same poll (a burst of responses after a stall).
  void send_due(double t) {
    if (stopped_) return;
    const auto next = source_.next_time();
    if (next && *next <= t) pump();
  }

  // --- the call's steps ---
  void connect(const std::shared_ptr<Call>& c);
  void write(const std::shared_ptr<Call>& c);
  void read_header(const std::shared_ptr<Call>& c);
  void read_body(const std::shared_ptr<Call>& c);
  void complete(const std::shared_ptr<Call>& c);
  void fail(const std::shared_ptr<Call>& c, RecordStatus status, const std::string& why);
  void fail_raw(Call& c, RecordStatus status, const std::string& why);

 private:
  void pump();
  void launch(Request r, double intended, double released);
  size_t pick_replica();
  bool retry(const std::shared_ptr<Call>& c, const boost::system::error_code& ec);
  void deliver(Call& c);
  void watch_stop();
  void maybe_finish();
  void arm_timeouts();
  void on_timeouts();

  asio::io_context ioc_{1};
  RequestSource& source_;
  const HttpDriverOptions& opt_;
  std::string label_;
  const RecordSinks& sinks_;
  std::function<bool(uint64_t)> is_warmup_;
  const std::atomic<bool>* stop_;
  std::vector<Endpoint> endpoints_;
  std::vector<tcp::resolver::results_type> resolved_;
  std::vector<std::string> resolve_errors_;
  std::vector<std::vector<std::shared_ptr<Conn>>> idle_;
  std::vector<int> outstanding_;
  size_t rr_ = 0;
  asio::steady_timer send_timer_, stop_timer_;
  /// Calls in launch order, so in deadline order (one timeout for all): one timer at the first
  /// deadline instead of a timer per call (armed and cancelled per request). A finished call's
  /// entry is dropped when it reaches the front. Also what a stop aborts.
  std::deque<std::weak_ptr<Call>> live_;
  asio::steady_timer timeout_timer_;
  bool timeout_armed_ = false;
  Clock::time_point t0_;
  int in_flight_ = 0;
  bool stopped_ = false;
  bool timer_armed_ = false;
  HttpDriveStats result_;
};

void Call::on_event(std::string_view data) {
  if (done) return;
  const ChunkInfo info = interpret_chunk(data, keep_text ? &raw_text : nullptr);
  if (info.malformed) {
    std::string shown(data.substr(0, 80));
    return driver.fail_raw(*this, RecordStatus::error, "malformed chunk: " + shown);
  }
  if (!info.error.empty()) return driver.fail_raw(*this, RecordStatus::error, "error event: " + info.error);
  if (info.done) {
    got_done = true;
    return;
  }
  if (info.prompt_tokens) usage_prompt = info.prompt_tokens;
  if (info.completion_tokens) usage_completion = info.completion_tokens;
  if (info.finish_reason) finish_reason = info.finish_reason;
  if (info.token) {
    ++n_chunks;
    if (rec.first_token_s < 0) rec.first_token_s = chunk_time;
    rec.token_times_s.push_back(chunk_time);
  }
}

size_t Driver::pick_replica() {
  if (endpoints_.size() == 1) return 0;
  if (opt_.target.balance == Balance::least_outstanding) {
    size_t best = rr_ % endpoints_.size();
    for (size_t k = 0; k < endpoints_.size(); ++k) {
      const size_t i = (rr_ + k) % endpoints_.size();
      if (outstanding_[i] < outstanding_[best]) best = i;
    }
    ++rr_;
    return best;
  }
  return rr_++ % endpoints_.size();
}

void Driver::pump() {
  if (stopped_) return;
  const double t = now();
  for (auto next = source_.next_time(); next && *next <= t; next = source_.next_time()) {
    const double intended = *next;
    Request r = source_.take();
    const auto held = source_.held_until();  // a max-concurrency cap's own wait, not lateness
    launch(std::move(r), intended, held ? std::max(*held, intended) : -1.0);
    if (stopped_) return;
  }
  if (auto next = source_.next_time()) {
    timer_armed_ = true;
    send_timer_.expires_at(t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*next)));
    send_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      timer_armed_ = false;
      pump();
    });
  } else {
    maybe_finish();
  }
}

void Driver::launch(Request r, double intended, double released) {
  // Not make_shared: live_ holds weak pointers, which would keep a make_shared call's memory.
  std::shared_ptr<Call> c(new Call(*this));
  c->request = std::move(r);
  c->rec.run = label_;
  c->rec.id = c->request.id;
  if (c->request.lora) c->rec.lora = c->request.lora->name;
  c->rec.arrival_s = intended;
  c->rec.released_s = released;
  c->rec.sent_s = std::max(now(), released);
  c->rec.prompt_tokens = static_cast<int>(c->request.prompt.size());
  c->rec.token_times_s.reserve(static_cast<size_t>(std::clamp(c->request.sampling.max_tokens, 0, 4096)));
  c->rec.warmup = is_warmup_ && is_warmup_(c->request.id);
  c->replica = pick_replica();
  ++outstanding_[c->replica];
  ++result_.replicas[c->replica].n_sent;
  ++result_.stats.n_sent;
  ++in_flight_;
  c->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.target.timeout_s));
  live_.push_back(c);

  const Endpoint& ep = endpoints_[c->replica];
  std::optional<StructuredMember> member;
  if (opt_.structured) {
    if (const std::string* entry = opt_.structured->schema_text(c->request.id)) {
      c->rec.schema = opt_.structured->schema_of(c->request.id);
      c->keep_text = true;
      member = structured_member(opt_.structured->spec(), c->rec.schema, *entry);
    }
  }
  const std::string body = request_body(c->request, opt_.target, opt_.tokenizer, member ? &*member : nullptr);
  std::string& w = c->wire;
  w.reserve(body.size() + 256);
  w += "POST ";
  w += ep.prefix;
  w += opt_.target.api == TargetApi::chat ? "/v1/chat/completions" : "/v1/completions";
  w += " HTTP/1.1\r\nHost: ";
  w += ep.host;
  w += ':';
  w += ep.port;
  w += "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: ";
  w += std::to_string(body.size());
  w += "\r\n";
  for (const auto& [k, v] : opt_.target.headers) {
    w += k;
    w += ": ";
    w += v;
    w += "\r\n";
  }
  w += "\r\n";
  w += body;

  if (!timeout_armed_) arm_timeouts();
  if (!resolve_errors_[c->replica].empty()) return fail(c, RecordStatus::error, resolve_errors_[c->replica]);
  auto& idle = idle_[c->replica];
  if (!idle.empty()) {
    c->conn = std::move(idle.back());
    idle.pop_back();
    c->reused = true;
    write(c);
  } else {
    connect(c);
  }
}

void Driver::connect(const std::shared_ptr<Call>& c) {
  c->conn = std::make_shared<Conn>(ioc_);
  c->reused = false;
  asio::async_connect(c->conn->socket, resolved_[c->replica],
                      [this, c](boost::system::error_code ec, const tcp::endpoint&) {
                        if (c->done) return;
                        if (ec) return fail(c, RecordStatus::error, "connect: " + ec.message());
                        boost::system::error_code ignored;
                        c->conn->socket.set_option(tcp::no_delay(true), ignored);
                        write(c);
                      });
}

void Driver::write(const std::shared_ptr<Call>& c) {
  if (!c->retried) c->rec.sent_s = std::max(c->rec.sent_s, now());
  asio::async_write(c->conn->socket, asio::buffer(c->wire), [this, c](boost::system::error_code ec, size_t) {
    if (c->done) return;
    if (ec) {
      if (retry(c, ec)) return;
      return fail(c, RecordStatus::error, "write: " + ec.message());
    }
    read_header(c);
  });
}

bool Driver::retry(const std::shared_ptr<Call>& c, const boost::system::error_code& ec) {
  // A pooled connection the server closed while idle fails before any byte of a response:
  // send once more on a fresh connection.
  if (!c->reused || c->retried || c->got_response_bytes) return false;
  (void)ec;
  c->retried = true;
  boost::system::error_code ignored;
  c->conn->socket.close(ignored);
  connect(c);
  return true;
}

void Driver::read_header(const std::shared_ptr<Call>& c) {
  c->parser.emplace();
  c->parser->body_limit(std::uint64_t{1} << 34);
  http::async_read_header(c->conn->socket, c->conn->buffer, *c->parser, [this, c](boost::system::error_code ec, size_t) {
    if (c->done) return;
    if (ec) {
      if (retry(c, ec)) return;
      return fail(c, RecordStatus::error, "reading response: " + ec.message());
    }
    c->got_response_bytes = true;
    c->status = c->parser->get().result_int();
    read_body(c);
  });
}

void Driver::read_body(const std::shared_ptr<Call>& c) {
  if (c->parser->is_done()) return complete(c);
  auto& body = c->parser->get().body();
  body.data = c->conn->body_buf;
  body.size = sizeof c->conn->body_buf;
  http::async_read_some(c->conn->socket, c->conn->buffer, *c->parser, [this, c](boost::system::error_code ec, size_t) {
    if (c->done) return;
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = sizeof c->conn->body_buf - c->parser->get().body().size;
    if (got > 0) {
      if (c->status == 200) {
        c->chunk_time = now();
        send_due(c->chunk_time);
        c->sse.feed(std::string_view(c->conn->body_buf, got));
        if (c->done) return;  // a malformed or error chunk ended it
        if (c->sse.buffered() > kMaxSseLine) return fail(c, RecordStatus::error, "malformed stream: an event over 16 MiB");
      } else if (c->error_body.size() < kMaxErrorBody) {
        c->error_body.append(c->conn->body_buf, std::min(got, kMaxErrorBody - c->error_body.size()));
      }
    }
    if (ec) {
      if (c->status == 200 && (c->got_done || c->finish_reason) && ec == http::error::end_of_stream) return complete(c);
      return fail(c, RecordStatus::error,
                  (c->status == 200 ? "stream cut: " : "HTTP " + std::to_string(c->status) + ", body cut: ") + ec.message());
    }
    read_body(c);
  });
}

void Driver::complete(const std::shared_ptr<Call>& c) {
  if (c->done) return;
  if (c->status != 200) {
    const RecordStatus st = c->status == 429 || c->status == 503 ? RecordStatus::rejected : RecordStatus::error;
    return fail(c, st, "HTTP " + std::to_string(c->status) + ": " + error_message(c->error_body));
  }
  c->sse.finish();
  if (c->done) return;
  if (!c->got_done && !c->finish_reason) return fail(c, RecordStatus::error, "stream ended before [DONE] or a finish_reason");
  c->done = true;
  RequestRecord& r = c->rec;
  r.end_s = now();
  r.output_tokens = c->usage_completion.value_or(c->n_chunks);
  if (c->usage_prompt) r.prompt_tokens = *c->usage_prompt;
  // More token-bearing chunks than usage counts (a server that sends empty keep-alive deltas):
  // keep the first ones and the last chunk's time, so the record stays one entry per token at most.
  if (static_cast<int>(r.token_times_s.size()) > r.output_tokens) {
    const double last = r.token_times_s.back();
    r.token_times_s.resize(std::max(r.output_tokens, 0));
    if (!r.token_times_s.empty()) r.token_times_s.back() = last;
  }
  r.status = RecordStatus::ok;
  if (c->keep_text) r.output_text = decode_json_string_contents(c->raw_text);
  if (c->parser->keep_alive()) idle_[c->replica].push_back(std::move(c->conn));
  c->conn.reset();
  ++result_.replicas[c->replica].n_ok;
  deliver(*c);
}

void Driver::fail(const std::shared_ptr<Call>& c, RecordStatus status, const std::string& why) {
  fail_raw(*c, status, why);
}

void Driver::fail_raw(Call& c, RecordStatus status, const std::string& why) {
  if (c.done) return;
  c.done = true;
  if (c.conn) {
    // Close, but keep the connection until the call goes: a read still pending on it (a timeout
    // or a stop fails the call mid-stream) completes with operation_aborted later and writes to
    // the connection's buffer then (freeing it here was a heap-use-after-free under TSan/ASan).
    boost::system::error_code ignored;
    c.conn->socket.close(ignored);
  }
  RequestRecord& r = c.rec;
  r.end_s = now();
  r.status = status;
  r.error = why;
  r.output_tokens = c.usage_completion.value_or(c.n_chunks);
  ++result_.replicas[c.replica].n_failed;
  deliver(c);
}

void Driver::deliver(Call& c) {
  while (!live_.empty() && live_.front().expired()) live_.pop_front();  // bounded by the oldest live call
  --outstanding_[c.replica];
  --in_flight_;
  ++result_.stats.n_finished;
  result_.stats.n_tokens += c.rec.output_tokens;
  result_.stats.end_s = std::max(result_.stats.end_s, c.rec.end_s);
  if (sinks_.on_record) sinks_.on_record(c.rec);
  FinishedRequest f;
  f.request_id = c.rec.id;
  f.reason = c.rec.status == RecordStatus::ok ? FinishReason::length : FinishReason::aborted;
  source_.on_finished(f, c.rec.end_s);
  // A closed-loop source may have released the next request (open loop: the timer is armed).
  if (!timer_armed_)
    asio::post(ioc_, [this] {
      if (!stopped_ && !timer_armed_) pump();
    });
}

void Driver::maybe_finish() {
  if (in_flight_ == 0 && (stopped_ || source_.exhausted())) {
    send_timer_.cancel();
    stop_timer_.cancel();
    timeout_timer_.cancel();
  }
}

void Driver::arm_timeouts() {
  while (!live_.empty()) {  // finished calls at the front go
    auto c = live_.front().lock();
    if (c && !c->done) break;
    live_.pop_front();
  }
  if (live_.empty()) return;
  timeout_armed_ = true;
  timeout_timer_.expires_at(live_.front().lock()->deadline);
  timeout_timer_.async_wait([this](boost::system::error_code ec) {
    timeout_armed_ = false;
    if (!ec) on_timeouts();
  });
}

void Driver::on_timeouts() {
  const Clock::time_point t = Clock::now();
  while (!live_.empty()) {
    auto c = live_.front().lock();
    if (c && !c->done) {
      if (c->deadline > t) break;
      char buf[64];
      std::snprintf(buf, sizeof buf, "timeout after %g s", opt_.target.timeout_s);
      fail(c, RecordStatus::error, buf);
    }
    live_.pop_front();
  }
  if (!stopped_) arm_timeouts();
}

void Driver::watch_stop() {
  stop_timer_.expires_after(std::chrono::milliseconds(50));
  stop_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    if (stop_->load()) {
      stopped_ = true;
      send_timer_.cancel();
      timeout_timer_.cancel();
      const auto calls = std::exchange(live_, {});  // deliver() trims live_
      for (auto& w : calls)
        if (auto c = w.lock()) fail(c, RecordStatus::aborted, "aborted before it finished (run stopped)");
      return;
    }
    if (in_flight_ == 0 && source_.exhausted()) return;
    watch_stop();
  });
}

}  // namespace

HttpDriveStats drive_http(RequestSource& source, const HttpDriverOptions& options, const std::string& run_label,
                          const RecordSinks& sinks, const std::function<bool(uint64_t)>& is_warmup,
                          const std::atomic<bool>* stop) {
  Driver d(source, options, run_label, sinks, is_warmup, stop);
  return d.run();
}

}  // namespace servelab::http_load
