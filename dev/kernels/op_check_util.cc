#include "op_check_util.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace tandem::opcheck {
namespace {

std::atomic<uint64_t> g_seed{1};
bool g_small = false;
std::vector<Row>& Rows() {
  static std::vector<Row> rows;
  return rows;
}

std::string Rate(const Row& r) {
  if (r.time_us <= 0) return "-";
  char buf[96];
  if (r.flops > 0) {
    const double tflops = r.flops / (r.time_us * 1e-6) / 1e12;
    std::snprintf(buf, sizeof(buf), "%8.1f TFLOP/s (%3.0f%%)", tflops, 100.0 * tflops / kCeilingTflops);
  } else {
    const double gbs = r.bytes / (r.time_us * 1e-6) / 1e9;
    std::snprintf(buf, sizeof(buf), "%8.0f GB/s    (%3.0f%%)", gbs, 100.0 * gbs / kCeilingGBs);
  }
  return buf;
}

void PrintRow(const Row& r) {
  char time[32] = "-";
  if (r.time_us > 0) std::snprintf(time, sizeof(time), "%10.1f", r.time_us);
  std::printf("%-4s %-18s %-44s rel %9.2e  max %9.2e  tol %7.1e  %10s us  %s%s%s\n",
              r.pass ? "ok" : "FAIL", r.op.c_str(), r.shape.c_str(), r.err.rel, r.err.max_abs, r.tol,
              time, Rate(r).c_str(), r.note.empty() ? "" : "  ", r.note.c_str());
}

}  // namespace

bool Small() { return g_small; }
void SetSmall(bool small) { g_small = small; }

uint64_t NextSeed() { return g_seed.fetch_add(0x9e3779b97f4a7c15ull); }
void SetBaseSeed(uint64_t seed) { g_seed = seed; }

std::vector<float> ToFloat(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(v.data());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(bits[i]);
  return out;
}

std::vector<float> DownloadFloat(const DevBuf<bf16>& b) { return ToFloat(b.Download()); }

std::vector<float> DownloadFloat(const bf16* p, size_t n) {
  std::vector<bf16> v(n);
  OC_CUDA(cudaMemcpy(v.data(), p, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  return ToFloat(v);
}

void UploadBf16(bf16* dst, const std::vector<float>& v) {
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16_rn(v[i]);
  OC_CUDA(cudaMemcpy(dst, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}

ErrorStats Compare(const float* out, const float* ref, size_t n) {
  ErrorStats s;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      ++s.non_finite;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    diff2 += d * d;
    ref2 += static_cast<double>(ref[i]) * ref[i];
    s.max_abs = std::max(s.max_abs, std::fabs(d));
  }
  s.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (s.non_finite > 0) s.rel = NAN;
  return s;
}

bool TimingOff() { return g_small || std::getenv("OPCHECK_NO_TIMING") != nullptr; }

double TimeUs(const std::function<void()>& fn, int reps_per_sample, int samples) {
  if (TimingOff()) return -1;
  for (int i = 0; i < 3; ++i) fn();
  OC_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  OC_CUDA(cudaEventCreate(&start));
  OC_CUDA(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    OC_CUDA(cudaEventRecord(start));
    for (int r = 0; r < reps_per_sample; ++r) fn();
    OC_CUDA(cudaEventRecord(stop));
    OC_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    OC_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.0 * ms / reps_per_sample);
  }
  OC_CUDA(cudaGetLastError());
  OC_CUDA(cudaEventDestroy(start));
  OC_CUDA(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double TimeUsGraph(const std::function<void(cudaStream_t)>& fn, int reps_per_sample, int samples) {
  if (TimingOff()) return -1;
  cudaStream_t stream = nullptr;
  OC_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) fn(stream);
  OC_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    for (int r = 0; r < reps_per_sample; ++r) fn(stream);
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
         cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  std::vector<double> us;
  if (ok) {
    cudaEvent_t start, stop;
    OC_CUDA(cudaEventCreate(&start));
    OC_CUDA(cudaEventCreate(&stop));
    OC_CUDA(cudaGraphLaunch(exec, stream));  // warm
    for (int s = 0; s < samples; ++s) {
      OC_CUDA(cudaEventRecord(start, stream));
      OC_CUDA(cudaGraphLaunch(exec, stream));
      OC_CUDA(cudaEventRecord(stop, stream));
      OC_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      OC_CUDA(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(1000.0 * ms / reps_per_sample);
    }
    OC_CUDA(cudaEventDestroy(start));
    OC_CUDA(cudaEventDestroy(stop));
  }
  (void)cudaGetLastError();  // a failed capture's error is this function's -1
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  OC_CUDA(cudaStreamSynchronize(stream));
  OC_CUDA(cudaStreamDestroy(stream));
  if (us.empty()) return -1;
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void Record(Row row) {
  if (!std::isfinite(row.err.rel) && row.err.non_finite > 0 && row.note.empty()) {
    row.note = std::to_string(row.err.non_finite) + " non-finite outputs";
  }
  PrintRow(row);
  std::fflush(stdout);
  Rows().push_back(std::move(row));
}

int PrintTable() {
  int failed = 0;
  std::printf("\n==== cuda_op_check summary (rel = ||out-ref||/||ref||; GB/s and TFLOP/s beside "
              "the DESIGN.md ceilings %.0f GB/s, %.0f TFLOP/s) ====\n", kCeilingGBs, kCeilingTflops);
  for (const Row& r : Rows()) {
    PrintRow(r);
    if (!r.pass) ++failed;
  }
  std::printf("==== %zu checks, %d failed ====\n", Rows().size(), failed);
  return failed;
}

}  // namespace tandem::opcheck
