// The server's own state beside the client's latencies: one figure per strategy, two panels on
// one time axis. Above, what the client saw (each request's TTFT at its arrival, the requests
// waiting for their first token, and for HTTP runs the server's own mean TTFT); below, what the
// server said about itself at the same instants (running and waiting requests, KV cache in use,
// preemptions). A TTFT spike then lines up with the queue, the KV ceiling or the preemptions that
// caused it.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "analysis/plots.h"
#include "analysis/plots_internal.h"
#include "analysis/text_format.h"

namespace servelab::analysis::plot_detail {
namespace {

/// Which columns of server_state_<file>.dat hold any value (gnuplot refuses a curve with none).
struct Columns {
  bool running = false, waiting = false, kv = false, preemptions = false, ttft = false;
  bool any_server() const { return running || waiting || kv || preemptions; }
};

Columns write_state_data(const std::filesystem::path& plots, const std::string& file, const std::string& label,
                         const std::string& source, const std::vector<ServerState>& states) {
  Columns c;
  std::ostringstream d;
  d << "# " << label << " (" << source << ")\n# t_s running waiting kv_pct preemptions server_ttft_ms\n";
  const std::size_t stride = std::max<std::size_t>(1, (states.size() + 3999) / 4000);  // <= 4000 points
  for (std::size_t i = 0; i < states.size(); i += stride) {
    const ServerState& s = states[i];
    d << dat(s.t_s) << " " << dat(s.running) << " " << dat(s.waiting) << " " << dat(s.kv_pct) << " "
      << dat(s.preemptions) << " " << dat(s.ttft_ms) << "\n";
  }
  for (const auto& s : states) {
    c.running = c.running || std::isfinite(s.running);
    c.waiting = c.waiting || std::isfinite(s.waiting);
    c.kv = c.kv || std::isfinite(s.kv_pct);
    c.preemptions = c.preemptions || std::isfinite(s.preemptions);
    c.ttft = c.ttft || std::isfinite(s.ttft_ms);
  }
  write_file(plots / ("server_state_" + file + ".dat"), d.str());
  return c;
}

std::string state_figure(const std::string& out, const std::string& label, const std::string& file,
                         const std::string& source, const Columns& c, double t_end) {
  const std::string st = q("server_state_" + file + ".dat");
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset output " << q(out) << "\n";
  s << "set multiplot layout 2,1 title " << q("Client and server over time: " + label + " (server: " + source + ")")
    << "\n";
  // Fixed margins so both panels' x axes line up exactly.
  s << "set lmargin 10\nset rmargin 10\nset grid\nset key top left horizontal box opaque font ',9'\n";
  s << "set xrange [0:" << dat(t_end > 0 ? t_end : 1) << "]\nset format x ''\n";
  s << "set title 'client: TTFT at arrival and requests waiting for a first token'\n";
  s << "set ylabel 'TTFT (ms)'\nset y2label 'waiting (client)'\nset ytics nomirror\nset y2tics\n"
       "set yrange [0:*]\nset y2range [0:*]\n";
  s << "plot " << q("ttft_time_" + file + ".dat") << " using 1:2 with points pt 7 ps 0.5 lc 1 title 'TTFT' axes x1y1, \\\n"
    << "     " << q("queue_time_" + file + ".dat") << " using 1:2 with steps lw 1.5 lc 2 title 'waiting' axes x1y2";
  if (c.ttft)
    s << ", \\\n     " << st << " using 1:6 with linespoints pt 6 ps 0.5 lw 1.5 lc 7 title 'server mean TTFT' axes x1y1";
  s << "\n";
  s << "set format x '% h'\nset xlabel 'time since run start (s)'\n";
  s << "set title 'server: running and waiting requests, KV cache in use, preemptions'\n";
  s << "set ylabel 'requests'\nset y2label 'KV cache in use (%)'\nset yrange [0:*]\nset y2range [0:100]\n";
  std::vector<std::string> curves;
  if (c.running) curves.push_back(st + " using 1:2 with steps lw 2 lc 3 title 'running' axes x1y1");
  if (c.waiting) curves.push_back(st + " using 1:3 with steps lw 2 lc 4 title 'waiting' axes x1y1");
  if (c.preemptions) curves.push_back(st + " using 1:5 with steps lw 1.5 dt 2 lc 6 title 'preemptions (cumulative)' axes x1y1");
  if (c.kv) curves.push_back(st + " using 1:4 with lines lw 1.5 lc 5 title 'KV in use (%)' axes x1y2");
  s << "plot ";
  for (std::size_t i = 0; i < curves.size(); ++i) s << (i ? ", \\\n     " : "") << curves[i];
  s << "\nunset multiplot\n";
  return s.str();
}

}  // namespace

std::vector<Figure> server_state_figures(const std::filesystem::path& plots, const Summary& summary,
                                         const std::vector<RequestRecord>& records,
                                         const std::vector<StepRecord>& steps,
                                         const std::vector<ServerSample>& samples) {
  std::vector<Figure> figures;
  for (const auto& name : summary.strategies()) {
    const RunSummary* top = nullptr;  // the strategy's highest-rate run, as the TTFT/queue figure
    for (const auto& r : summary.runs)
      if (r.info.strategy_name() == name && (!top || (std::isfinite(r.info.rate) && r.info.rate > top->info.rate)))
        top = &r;
    if (!top) continue;
    const std::string label = repetition_label(top->info.label, 1, top->info.repeats);
    std::vector<ServerState> states = server_state_from_samples(samples, label);
    std::string source = "its /metrics";
    if (states.empty()) {
      states = server_state_from_steps(steps, label);
      source = "engine steps";
    }
    if (states.empty()) continue;
    const std::string file = slug(name);
    double ttft_max = 0.0;
    if (!ttft_queue_data(plots, file, label, records, ttft_max)) continue;
    const Columns c = write_state_data(plots, file, label, source, states);
    if (!c.any_server()) continue;
    double t_end = states.back().t_s;
    for (const auto& r : records)
      if (r.run == label) t_end = std::max(t_end, r.end_s);
    const std::string base = "server_state_" + file;
    figures.push_back({base, "Client and server over time: " + label,
                       state_figure(base + ".svg", label, file, source, c, t_end),
                       state_figure(base + ".png", label, file, source, c, t_end)});
  }
  return figures;
}

}  // namespace servelab::analysis::plot_detail
