#include "planner/predictor.h"

#include <algorithm>

namespace tandem::planner {

Result<PredictorKind> ParsePredictorKind(std::string_view name) {
  if (name == "constant") return PredictorKind::kConstant;
  if (name == "ewma") return PredictorKind::kEwma;
  if (name == "linear-trend") return PredictorKind::kLinearTrend;
  return Err(StatusCode::kInvalidArgument,
             "unknown predictor '{}' (expected constant, ewma or linear-trend)", name);
}

const char* PredictorName(PredictorKind kind) {
  switch (kind) {
    case PredictorKind::kEwma: return "ewma";
    case PredictorKind::kLinearTrend: return "linear-trend";
    default: return "constant";
  }
}

LoadPredictor::LoadPredictor(PredictorKind kind, double alpha, int window)
    : kind_(kind), alpha_(std::clamp(alpha, 1e-6, 1.0)), window_(static_cast<size_t>(std::max(2, window))) {}

void LoadPredictor::Observe(double value) {
  ewma_ = num_observed_ == 0 ? value : alpha_ * value + (1 - alpha_) * ewma_;
  recent_.push_back(value);
  if (recent_.size() > window_) recent_.pop_front();
  ++num_observed_;
}

double LoadPredictor::Predict() const {
  if (recent_.empty()) return 0;
  switch (kind_) {
    case PredictorKind::kEwma: return ewma_;
    case PredictorKind::kLinearTrend: {
      const size_t n = recent_.size();
      if (n < 2) return recent_.back();
      // Least squares over x = 0 .. n-1, evaluated at x = n.
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (size_t i = 0; i < n; ++i) {
        sx += static_cast<double>(i);
        sy += recent_[i];
        sxx += static_cast<double>(i * i);
        sxy += static_cast<double>(i) * recent_[i];
      }
      const double dn = static_cast<double>(n);
      const double slope = (dn * sxy - sx * sy) / (dn * sxx - sx * sx);
      const double intercept = (sy - slope * sx) / dn;
      return std::max(0.0, intercept + slope * dn);
    }
    default: return recent_.back();
  }
}

}  // namespace tandem::planner
