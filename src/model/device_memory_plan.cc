#include "model/device_memory_plan.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {

double GiB(double bytes) { return bytes / static_cast<double>(1ull << 30); }

}  // namespace

Status CheckGpuMemoryUtilization(double u) {
  if (u > 0.0 && u <= 1.0) return Status::Ok();
  return Err(StatusCode::kInvalidArgument, "gpu_memory_utilization must be in (0, 1] but is {}", u);
}

Status CheckWeightsFit(const WeightsFitInput& in) {
  const double u = in.gpu_memory_utilization;
  TANDEM_RETURN_IF_ERROR(CheckGpuMemoryUtilization(u));
  const double total = static_cast<double>(in.total_bytes);
  const double allowed = std::min(u * total, static_cast<double>(in.free_bytes));
  const double need = static_cast<double>(in.weights_bytes) + static_cast<double>(in.reserve_bytes);
  if (need <= allowed) return Status::Ok();
  std::string hint;
  if (need > static_cast<double>(in.free_bytes)) {
    hint = need <= total ? "free the GPU (other processes hold it) or use a GPU with more memory"
                         : "use a GPU with more memory, or a smaller or quantized checkpoint";
  } else {
    // The smallest utilization that fits, rounded up to 0.01.
    const double least = std::ceil(need / total * 100.0) / 100.0;
    hint = fmt::format("raise --gpu-memory-utilization to at least {:.2f}", least);
  }
  return Err(StatusCode::kResourceExhausted,
             "the weights of {} do not fit on {}: they need {:.2f} GiB, plus {:.2f} GiB for "
             "activations, workspaces and one KV block, but --gpu-memory-utilization {} of "
             "{:.2f} GiB allows {:.2f} GiB and {:.2f} GiB are free: {}",
             in.model, in.device, GiB(static_cast<double>(in.weights_bytes)),
             GiB(static_cast<double>(in.reserve_bytes)), u, GiB(total), GiB(u * total),
             GiB(static_cast<double>(in.free_bytes)), hint);
}

}  // namespace tandem
