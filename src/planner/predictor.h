// Load predictors of the SLA planner (issue 27; Dynamo's planner offers the same three): each
// observes one quantity per adjustment interval (request rate, mean prompt length, ...) and
// predicts its value over the next interval.
//   constant      the last value observed
//   ewma          an exponentially weighted mean: m = alpha x + (1 - alpha) m (alpha in (0, 1])
//   linear-trend  the least-squares line through the last `window` values, one interval ahead
//                 (never below 0)
// Before any observation every predictor says 0.
#pragma once

#include <deque>
#include <string_view>

#include "common/status.h"

namespace tandem::planner {

enum class PredictorKind { kConstant, kEwma, kLinearTrend };
// InvalidArgument naming the accepted values for anything but constant, ewma, linear-trend.
Result<PredictorKind> ParsePredictorKind(std::string_view name);
const char* PredictorName(PredictorKind kind);

class LoadPredictor {
 public:
  explicit LoadPredictor(PredictorKind kind = PredictorKind::kConstant, double alpha = 0.5, int window = 6);
  void Observe(double value);
  double Predict() const;
  int num_observed() const { return num_observed_; }

 private:
  PredictorKind kind_;
  double alpha_;
  size_t window_;
  std::deque<double> recent_;  // the last `window` values
  double ewma_ = 0;
  int num_observed_ = 0;
};

}  // namespace tandem::planner
