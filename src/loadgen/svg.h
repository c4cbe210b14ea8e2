// A small SVG 1.1 writer and the two chart kinds `tandem bench` draws: line charts (points joined,
// each labelled; linear or log10 y axis) and histograms. Self-contained files, no scripts or fonts
// beyond the generic sans-serif, so any browser or rsvg-convert renders them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::bench {

// &, <, >, " and ' escaped; control characters other than tab/newline dropped.
std::string XmlEscape(std::string_view text);

class SvgWriter {
 public:
  SvgWriter(double width, double height);
  void Rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view stroke = "none");
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = "");
  void Polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                double width = 2);
  void Circle(double cx, double cy, double r, std::string_view fill);
  // anchor: start | middle | end; rotate in degrees about (x, y).
  void Text(double x, double y, std::string_view text, double size = 12,
            std::string_view anchor = "start", double rotate = 0, std::string_view fill = "#222");
  std::string Finish() const;  // the whole document

 private:
  double width_, height_;
  std::string body_;
};

// Axis ticks: "nice" values (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target = 6);
// Short tick text: 0.5, 12, 1.5k, 2M.
std::string TickLabel(double v);

// A chart's y axis: its ticks and the range [lo, hi] they span. log_y: whole decades around
// [ymin, ymax] (ymin > 0), lo and hi in log10 units, ticks 1, 2, 5 x 10^e within three decades and
// 10^e beyond; else NiceTicks(0, linear_top), lo and hi its first and last tick.
struct YAxis {
  std::vector<double> ticks;
  double lo = 0, hi = 1;
};
YAxis MakeYAxis(bool log_y, double ymin, double ymax, double linear_top);

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
  std::vector<std::string> point_labels;          // optional, one per point
};

std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<ChartSeries>& series,
                      bool log_y);

// A histogram of `values` in `bins` equal bins from min to max (p99.5 when the tail is long),
// values beyond the last bin counted in it; the caption notes count, p50, p99.
std::string HistogramChart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<double>& values,
                           int bins = 40);

}  // namespace tandem::bench
