#include "loadgen/timeline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "loadgen/report.h"
#include "loadgen/svg.h"

namespace tandem::bench {

namespace {

constexpr double kW = 960, kH = 460, kLeft = 80, kRight = 250, kTop = 56, kBottom = 60;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
constexpr const char* kBandFills[] = {"#f3f6fb", "#fbf6ee"};

}  // namespace

std::string TimelineChart(const std::string& title, const std::string& y_label,
                          const std::vector<TimelineSeries>& series, const std::vector<TimelineBand>& bands,
                          const std::vector<TimelineLine>& lines, double x_max, bool log_y) {
  SvgWriter svg(kW, kH);
  const double x0 = kLeft, x1 = kW - kRight, y0 = kH - kBottom, y1 = kTop;
  svg.Text(kW / 2, 30, title, 17, "middle");
  svg.Text((x0 + x1) / 2, kH - 16, "seconds from the start of the run", 13, "middle");
  svg.Text(22, (y0 + y1) / 2, y_label, 13, "middle", -90);
  double ymin = INFINITY, ymax = -INFINITY, xmax = x_max;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (log_y && !(y > 0)) continue;
      ymin = std::min(ymin, y), ymax = std::max(ymax, y), xmax = std::max(xmax, x);
    }
  for (const auto& l : lines)
    if (!log_y || l.y > 0) ymin = std::min(ymin, l.y), ymax = std::max(ymax, l.y);
  if (!std::isfinite(ymin) || !(xmax > 0)) {
    svg.Rect(x0, y1, x1 - x0, y0 - y1, "none", "#444");
    svg.Text(kW / 2, kH / 2, "no data", 14, "middle");
    return svg.Finish();
  }
  const std::vector<double> xt = NiceTicks(0, xmax);
  const double xhi = std::max(xt.back(), xmax);
  const YAxis axis = MakeYAxis(log_y, ymin, ymax, std::max(1.0, ymax * 1.1));
  const std::vector<double>& yt = axis.ticks;
  const double ylo = axis.lo, yhi = axis.hi;
  auto X = [&](double x) { return x0 + std::clamp(x / xhi, 0.0, 1.0) * (x1 - x0); };
  auto Y = [&](double y) {
    const double v = log_y ? std::log10(y) : y;
    return y0 - std::clamp((v - ylo) / (yhi - ylo), 0.0, 1.0) * (y0 - y1);
  };
  for (size_t i = 0; i < bands.size(); ++i) {
    const TimelineBand& b = bands[i];
    svg.Rect(X(b.x0), y1, std::max(0.0, X(b.x1) - X(b.x0)), y0 - y1, kBandFills[i % 2]);
    svg.Line(X(b.x0), y0, X(b.x0), y1, "#999", 1, "2,3");
    svg.Text(X(b.x0) + 4, y1 + 14, b.label, 11, "start", 0, "#555");
  }
  for (double t : xt) svg.Text(X(t), y0 + 18, TickLabel(t), 11, "middle");
  for (double t : yt) {
    svg.Line(x0, Y(t), x1, Y(t), "#e4e4e4");
    svg.Text(x0 - 6, Y(t) + 4, TickLabel(t), 11, "end");
  }
  svg.Rect(x0, y1, x1 - x0, y0 - y1, "none", "#444");
  double legend_y = kTop + 14;
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    const TimelineSeries& s = series[i];
    if (s.steps) {
      std::vector<std::pair<double, double>> pts;
      for (size_t k = 0; k < s.points.size(); ++k) {
        const auto [x, y] = s.points[k];
        if (k > 0) pts.emplace_back(X(x), pts.back().second);  // held until this point
        pts.emplace_back(X(x), Y(y));
      }
      // Series drawn on top of each other at equal values stay visible: a small offset each.
      for (auto& p : pts) p.second -= 2.0 * static_cast<double>(i);
      svg.Polyline(pts, color, 2.5);
    } else {
      for (const auto& [x, y] : s.points)
        if (!log_y || y > 0) svg.Circle(X(x), Y(y), 2.2, color);
    }
    svg.Line(x1 + 14, legend_y - 4, x1 + 38, legend_y - 4, color, 3);
    svg.Text(x1 + 44, legend_y, fmt::format("{} ({})", s.name, s.points.size()), 12);
    legend_y += 20;
  }
  for (const TimelineLine& l : lines) {
    if (log_y && !(l.y > 0)) continue;
    svg.Line(x0, Y(l.y), x1, Y(l.y), "#d62728", 1.5, "6,4");
    svg.Text(x1 - 4, Y(l.y) - 5, l.label, 11, "end", 0, "#d62728");
  }
  return svg.Finish();
}

Result<std::vector<std::string>> WriteTimelineCharts(const std::string& dir, const RunResult& run,
                                                     const std::vector<PhaseSpec>& phases, const Slo& slo,
                                                     const std::vector<std::string>& keys) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "cannot create {}: {}", dir, ec.message());
  std::vector<TimelineBand> bands;
  double x_max = 0;
  for (const PhaseSpec& p : phases) {
    bands.push_back({p.start_s, p.start_s + p.duration_s, p.name});
    x_max = std::max(x_max, p.start_s + p.duration_s);
  }
  for (const RequestRecord& r : run.records) x_max = std::max(x_max, r.start_s + r.e2e_s);
  for (const ScrapeSample& s : run.scrapes) x_max = std::max(x_max, s.t_s);
  if (!bands.empty()) bands.back().x1 = x_max;  // the last phase runs on until the run ends

  TimelineSeries ttft{"TTFT of a request", {}, false}, failed{"failed request", {}, false};
  TimelineSeries itl{"mean ITL of a request", {}, false};
  double ttft_top = 1;
  for (const RequestRecord& r : run.records)
    if (r.ok() && r.ttft_s >= 0) ttft_top = std::max(ttft_top, r.ttft_s * 1000);
  for (const RequestRecord& r : run.records) {
    if (!r.ok()) {
      failed.points.emplace_back(r.start_s, ttft_top);
      continue;
    }
    if (r.ttft_s >= 0) ttft.points.emplace_back(r.start_s, r.ttft_s * 1000);
    if (const double m = MeanItl(r); m >= 0) itl.points.emplace_back(r.start_s, m * 1000);
  }
  for (auto* s : {&ttft, &failed, &itl})
    std::sort(s->points.begin(), s->points.end());
  std::vector<TimelineLine> ttft_lines, itl_lines;
  if (slo.ttft_s) ttft_lines.push_back({*slo.ttft_s * 1000, fmt::format("SLO {:g} ms", *slo.ttft_s * 1000)});
  if (slo.itl_s) itl_lines.push_back({*slo.itl_s * 1000, fmt::format("SLO {:g} ms", *slo.itl_s * 1000)});

  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& svg) -> Status {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (Status st = WriteTextFile(path, svg); !st.ok()) return st;
    written.push_back(path);
    return Status::Ok();
  };
  std::vector<TimelineSeries> ttft_series{ttft};
  if (!failed.points.empty()) ttft_series.push_back(failed);
  if (Status st = write("ttft_over_time.svg", TimelineChart("TTFT over time (by send time)",
                                                            "time to first token, ms (log scale)",
                                                            ttft_series, bands, ttft_lines, x_max, true));
      !st.ok())
    return st;
  if (Status st = write("itl_over_time.svg", TimelineChart("Mean ITL per request over time (by send time)",
                                                           "inter-token latency, ms (log scale)", {itl},
                                                           bands, itl_lines, x_max, true));
      !st.ok())
    return st;
  std::vector<TimelineSeries> replicas;
  for (const std::string& key : keys) {
    TimelineSeries s{SeriesLabel(key), {}, true};
    for (const Step& p : SeriesOf(run.scrapes, key)) s.points.emplace_back(p.t_s, p.value);
    if (!s.points.empty()) replicas.push_back(std::move(s));
  }
  if (!replicas.empty()) {
    if (Status st = write("replicas_over_time.svg",
                          TimelineChart("Replicas over time (scraped every " +
                                            fmt::format("{:g}", run.config.scrape_interval_s) + " s)",
                                        "replicas", replicas, bands, {}, x_max, false));
        !st.ok())
      return st;
  }
  return written;
}

}  // namespace tandem::bench
