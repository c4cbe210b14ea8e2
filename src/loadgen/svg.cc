#include "loadgen/svg.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "loadgen/stats.h"

namespace tandem::bench {

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

SvgWriter::SvgWriter(double width, double height) : width_(width), height_(height) {}

void SvgWriter::Rect(double x, double y, double w, double h, std::string_view fill,
                     std::string_view stroke) {
  body_ += fmt::format(R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" stroke="{}"/>)svg",
                       x, y, std::max(0.0, w), std::max(0.0, h), XmlEscape(fill), XmlEscape(stroke));
  body_ += '\n';
}

void SvgWriter::Line(double x1, double y1, double x2, double y2, std::string_view stroke,
                     double width, std::string_view dash) {
  body_ += fmt::format(R"svg(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="{:g}")svg",
                       x1, y1, x2, y2, XmlEscape(stroke), width);
  if (!dash.empty()) body_ += fmt::format(R"svg( stroke-dasharray="{}")svg", XmlEscape(dash));
  body_ += "/>\n";
}

void SvgWriter::Polyline(const std::vector<std::pair<double, double>>& points,
                         std::string_view stroke, double width) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{:.1f},{:.1f} ", x, y);
  body_ += fmt::format(R"svg(<polyline points="{}" fill="none" stroke="{}" stroke-width="{:g}"/>)svg", pts,
                       XmlEscape(stroke), width);
  body_ += '\n';
}

void SvgWriter::Circle(double cx, double cy, double r, std::string_view fill) {
  body_ += fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="{:g}" fill="{}"/>)svg", cx, cy, r,
                       XmlEscape(fill));
  body_ += '\n';
}

void SvgWriter::Text(double x, double y, std::string_view text, double size,
                     std::string_view anchor, double rotate, std::string_view fill) {
  body_ += fmt::format(R"svg(<text x="{:.1f}" y="{:.1f}" font-size="{:g}" text-anchor="{}" fill="{}")svg", x,
                       y, size, XmlEscape(anchor), XmlEscape(fill));
  if (rotate != 0) body_ += fmt::format(R"svg( transform="rotate({:g} {:.1f} {:.1f})")svg", rotate, x, y);
  body_ += ">" + XmlEscape(text) + "</text>\n";
}

std::string SvgWriter::Finish() const {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:g}\" height=\"{1:g}\" "
      "viewBox=\"0 0 {0:g} {1:g}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0:g}\" height=\"{1:g}\" fill=\"white\"/>\n{2}</svg>\n",
      width_, height_, body_);
}

YAxis MakeYAxis(bool log_y, double ymin, double ymax, double linear_top) {
  YAxis a;
  if (!log_y) {
    a.ticks = NiceTicks(0, linear_top);
    a.lo = a.ticks.front();
    a.hi = a.ticks.back();
    return a;
  }
  a.lo = std::floor(std::log10(ymin));
  a.hi = std::ceil(std::log10(ymax));
  if (a.hi <= a.lo) a.hi = a.lo + 1;
  for (double e = a.lo; e <= a.hi; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (e + std::log10(m) <= a.hi + 1e-9 && (m == 1.0 || a.hi - a.lo <= 3)) a.ticks.push_back(m * std::pow(10, e));
    }
  }
  return a;
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const long first = static_cast<long>(std::floor(lo / step + 1e-9));
  const long last = static_cast<long>(std::ceil(hi / step - 1e-9));
  for (long k = first; k <= last; ++k) ticks.push_back(static_cast<double>(k) * step);
  return ticks;
}

std::string TickLabel(double v) {
  const double a = std::abs(v);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", std::round(v * 1000) / 1000);
}

namespace {

constexpr double kW = 860, kH = 500, kLeft = 80, kRight = 190, kTop = 56, kBottom = 64;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct Frame {
  double x0 = kLeft, x1 = kW - kRight, y0 = kH - kBottom, y1 = kTop;  // plot area (y0 bottom)
};

void DrawFrame(SvgWriter& svg, const std::string& title, const std::string& x_label,
               const std::string& y_label) {
  Frame f;
  svg.Text(kW / 2, 30, title, 17, "middle");
  svg.Text((f.x0 + f.x1) / 2, kH - 18, x_label, 13, "middle");
  svg.Text(22, (f.y0 + f.y1) / 2, y_label, 13, "middle", -90);
  svg.Rect(f.x0, f.y1, f.x1 - f.x0, f.y0 - f.y1, "none", "#444");
}

}  // namespace

std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<ChartSeries>& series,
                      bool log_y) {
  SvgWriter svg(kW, kH);
  DrawFrame(svg, title, x_label, y_label);
  Frame f;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (log_y && !(y > 0)) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  if (!std::isfinite(xmin)) {
    svg.Text(kW / 2, kH / 2, "no data", 14, "middle");
    return svg.Finish();
  }
  std::vector<double> xt = NiceTicks(std::min(0.0, xmin), xmax * 1.05);
  const double xlo = xt.front(), xhi = xt.back();
  const YAxis axis = MakeYAxis(log_y, ymin, ymax, ymax * 1.08);
  const std::vector<double>& yt = axis.ticks;
  const double ylo = axis.lo, yhi = axis.hi;
  auto X = [&](double x) { return f.x0 + (x - xlo) / (xhi - xlo) * (f.x1 - f.x0); };
  auto Y = [&](double y) {
    const double v = log_y ? std::log10(y) : y;
    return f.y0 - (v - ylo) / (yhi - ylo) * (f.y0 - f.y1);
  };
  for (double t : xt) {
    svg.Line(X(t), f.y0, X(t), f.y1, "#e4e4e4");
    svg.Text(X(t), f.y0 + 18, TickLabel(t), 11, "middle");
  }
  for (double t : yt) {
    svg.Line(f.x0, Y(t), f.x1, Y(t), "#e4e4e4");
    svg.Text(f.x0 - 6, Y(t) + 4, TickLabel(t), 11, "end");
  }
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    std::vector<std::pair<double, double>> pts;
    for (size_t k = 0; k < series[i].points.size(); ++k) {
      const auto [x, y] = series[i].points[k];
      if (log_y && !(y > 0)) continue;
      pts.emplace_back(X(x), Y(y));
      svg.Circle(X(x), Y(y), 3.5, color);
      if (k < series[i].point_labels.size())
        svg.Text(X(x) + 5, Y(y) - 6, series[i].point_labels[k], 10, "start", 0, color);
    }
    svg.Polyline(pts, color, 2);
    const double ly = kTop + 14 + 20 * static_cast<double>(i);
    svg.Line(f.x1 + 14, ly - 4, f.x1 + 38, ly - 4, color, 3);
    svg.Text(f.x1 + 44, ly, series[i].name, 12);
  }
  return svg.Finish();
}

std::string HistogramChart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<double>& values, int bins) {
  SvgWriter svg(kW, kH);
  DrawFrame(svg, title, x_label, y_label);
  Frame f;
  if (values.empty()) {
    svg.Text(kW / 2, kH / 2, "no data", 14, "middle");
    return svg.Finish();
  }
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const double lo = sorted.front();
  double hi = Percentile(sorted, 99.5);
  if (sorted.back() <= hi * 1.5) hi = sorted.back();  // keep the whole range unless a long tail
  if (!(hi > lo)) hi = lo + std::max(1e-3, std::abs(lo) * 0.01);
  bins = std::max(1, bins);
  std::vector<int> counts(bins, 0);
  for (double v : sorted) {
    int b = static_cast<int>((v - lo) / (hi - lo) * bins);
    counts[std::clamp(b, 0, bins - 1)]++;
  }
  const int cmax = *std::max_element(counts.begin(), counts.end());
  std::vector<double> yt = NiceTicks(0, cmax * 1.08);
  std::vector<double> xt = NiceTicks(lo, hi);
  auto X = [&](double x) { return f.x0 + (x - lo) / (hi - lo) * (f.x1 - f.x0); };
  auto Y = [&](double y) { return f.y0 - y / yt.back() * (f.y0 - f.y1); };
  for (double t : yt) {
    svg.Line(f.x0, Y(t), f.x1, Y(t), "#e4e4e4");
    svg.Text(f.x0 - 6, Y(t) + 4, TickLabel(t), 11, "end");
  }
  for (double t : xt) {
    if (t < lo - 1e-12 || t > hi + 1e-12) continue;
    svg.Line(X(t), f.y0, X(t), f.y0 + 5, "#444");
    svg.Text(X(t), f.y0 + 18, TickLabel(t), 11, "middle");
  }
  const double bw = (f.x1 - f.x0) / bins;
  for (int b = 0; b < bins; ++b)
    if (counts[b] > 0) svg.Rect(f.x0 + b * bw + 0.5, Y(counts[b]), bw - 1, f.y0 - Y(counts[b]), "#4c78a8");
  const double p50 = Percentile(sorted, 50), p99 = Percentile(sorted, 99);
  double label_y = f.y1 + 14;
  for (auto [name, v, color] : {std::tuple{"p50", p50, "#2ca02c"}, std::tuple{"p99", p99, "#d62728"}}) {
    if (v < lo || v > hi) continue;
    svg.Line(X(v), f.y0, X(v), f.y1, color, 2, "6,4");
    const bool right_edge = X(v) > f.x1 - 40;  // label inside the plot
    svg.Text(X(v) + (right_edge ? -4 : 4), label_y, name, 11, right_edge ? "end" : "start", 0, color);
    label_y += 14;
  }
  const double ly = kTop + 14;
  svg.Text(f.x1 + 14, ly, fmt::format("n = {}", sorted.size()), 12);
  svg.Text(f.x1 + 14, ly + 20, fmt::format("mean = {:.3g}", Summarize(sorted).mean), 12);
  svg.Text(f.x1 + 14, ly + 40, fmt::format("p50 = {:.3g}", p50), 12, "start", 0, "#2ca02c");
  svg.Text(f.x1 + 14, ly + 60, fmt::format("p99 = {:.3g}", p99), 12, "start", 0, "#d62728");
  svg.Text(f.x1 + 14, ly + 80, fmt::format("max = {:.3g}", sorted.back()), 12);
  if (sorted.back() > hi) svg.Text(f.x1 + 14, ly + 100, "(tail in last bin)", 11);
  return svg.Finish();
}

}  // namespace tandem::bench
