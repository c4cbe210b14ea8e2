// cuda_op_check: the sampling ops (log-softmax, argmax, top-k) against the CPU ones, and the GPU
// pick (penalties, temperature, min-p, top-k, top-p, draw: kernels/cuda/sampling_filter.h) against
// the CPU reference cpu::SampleWithUniform on the same fp32 logits and the same u.
#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/cpu/log_softmax.h"
#include "kernels/cpu/sample.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_filter.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// ArgmaxLogSumExp, one block per row, split as the workspace lets it (the chunk count depends on
// the SM count) and split into 7 chunks, against the CPU: the argmax index and max exactly, lse to
// 1e-5 relative (double reference sums). Row 3 (if any) is -inf but for two tied maxima far apart.
void ArgmaxLseCase(std::vector<float> logits, int rows, int n, const char* shape) {
  if (rows > 3) {
    std::fill_n(logits.begin() + 3 * static_cast<size_t>(n), n, -INFINITY);
    logits[3 * static_cast<size_t>(n) + 7] = 2.0f;
    logits[4 * static_cast<size_t>(n) - 3] = 2.0f;
  }
  DevBuf<float> d_logits(logits.size());
  d_logits.Upload(logits);
  DevBuf<int32_t> ids(rows);
  DevBuf<float> mx(rows), lse(rows);
  DevBuf<char> ws(cuda::ArgmaxLogSumExpWorkspaceBytes(rows));
  std::vector<double> ref_lse(rows);
  std::vector<float> ref_max(rows);
  std::vector<int32_t> ref_ids(rows);
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * n;
    ref_ids[r] = cpu::Argmax(row, n);
    ref_max[r] = row[ref_ids[r]];
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      if (row[i] != -INFINITY) sum += std::exp(static_cast<double>(row[i]) - ref_max[r]);
    }
    ref_lse[r] = ref_max[r] + std::log(sum);
  }
  double single_us = 0;
  for (const int mode : {0, 1, 7}) {  // one block a row, split as the API chooses, 7 chunks
    const bool split = mode != 0;
    auto run = [&] {
      if (mode == 7) {
        OC_CUDA(cuda::detail::LaunchArgmaxLogSumExp(d_logits.get(), n, rows, n, ids.get(), mx.get(),
                                                    lse.get(), nullptr, 7, ws.get()));
      } else {
        OC_OK(cuda::ArgmaxLogSumExp(d_logits.get(), n, rows, n, ids.get(), mx.get(), lse.get(), nullptr,
                                    split ? ws.get() : nullptr, split ? ws.size() : 0));
      }
    };
    ids.Poison();
    mx.Poison();
    lse.Poison();
    run();
    OC_CUDA(cudaDeviceSynchronize());
    const auto g_ids = ids.Download();
    const auto g_max = mx.Download();
    const auto g_lse = lse.Download();
    long bad = 0;
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      bad += g_ids[r] != ref_ids[r] || g_max[r] != ref_max[r];
      const double rel = std::abs(g_lse[r] - ref_lse[r]) / std::max(1.0, std::abs(ref_lse[r]));
      worst = std::isfinite(g_lse[r]) ? std::max(worst, rel) : 1e30;
    }
    Row row{"argmax_lse", std::string(shape) + (mode == 0 ? " one block a row" : mode == 1 ? " split" : " 7 chunks")};
    row.err.rel = worst;
    row.tol = 1e-5;
    row.pass = bad == 0 && worst <= row.tol;
    row.note = std::to_string(bad) + " rows with another argmax or max";
    row.time_us = TimeUs(run);
    row.bytes = static_cast<double>(rows) * n * sizeof(float);
    if (!split) single_us = row.time_us;
    if (mode == 1 && row.time_us > 0) {
      char note[96];
      std::snprintf(note, sizeof(note), "; x%.1f vs one block a row", single_us / row.time_us);
      row.note += note;
    }
    Record(row);
  }
}

void SamplingCase(int rows, int n, int k) {
  // Logits with many ties: bf16-rounded uniform values, plus planted rows.
  DevBuf<bf16> seed_vals(static_cast<size_t>(rows) * n);
  FillUniform(seed_vals.get(), seed_vals.size(), NextSeed(), -10.0f, 10.0f);
  std::vector<float> logits = DownloadFloat(seed_vals);
  if (rows > 0) logits[static_cast<size_t>(n) - 1] = 100.0f;                 // max at the end
  if (rows > 1) std::fill_n(logits.begin() + n, n, 1.5f);                    // all tied
  if (rows > 2) {
    logits[2 * static_cast<size_t>(n) + 5] = 50.0f;                          // tied maxima
    logits[3 * static_cast<size_t>(n) - 1] = 50.0f;
  }

  DevBuf<float> d_logits(logits.size()), d_lsm(logits.size()), d_vals(static_cast<size_t>(rows) * k);
  DevBuf<int32_t> d_arg(rows), d_ids(static_cast<size_t>(rows) * k);
  d_logits.Upload(logits);
  d_lsm.Poison();
  d_vals.Poison();
  d_arg.Poison();
  d_ids.Poison();
  auto lsm = [&] { OC_OK(cuda::LogSoftmax(d_logits.get(), n, rows, n, d_lsm.get(), n, nullptr)); };
  auto arg = [&] { OC_OK(cuda::Argmax(d_logits.get(), n, rows, n, d_arg.get(), nullptr)); };
  auto topk = [&] { OC_OK(cuda::TopK(d_lsm.get(), n, rows, n, k, d_ids.get(), d_vals.get(), nullptr)); };
  lsm();
  arg();
  topk();  // over the log-probs, as top_logprobs does
  OC_CUDA(cudaDeviceSynchronize());
  const auto g_lsm = d_lsm.Download();
  const auto g_arg = d_arg.Download();
  const auto g_ids = d_ids.Download();
  const auto g_vals = d_vals.Download();
  std::vector<float> ref_lsm(logits.size());
  long arg_bad = 0, topk_bad = 0;
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * n;
    cpu::LogSoftmax(row, n, ref_lsm.data() + static_cast<size_t>(r) * n);
    arg_bad += g_arg[r] != cpu::Argmax(row, n);
    // TopK of the GPU's own log-probs (the ranking must match exactly on the same input).
    const auto top = cpu::TopK(g_lsm.data() + static_cast<size_t>(r) * n, n, k);
    for (int i = 0; i < k; ++i) {
      topk_bad += g_ids[static_cast<size_t>(r) * k + i] != top[i].first ||
                  g_vals[static_cast<size_t>(r) * k + i] != top[i].second;
    }
  }
  char shape[96];
  std::snprintf(shape, sizeof(shape), "rows %d vocab %d", rows, n);
  const double row_bytes = static_cast<double>(rows) * n * sizeof(float);
  Row r1{"log_softmax", shape};
  r1.err = Compare(g_lsm, ref_lsm);
  r1.tol = 1e-5;
  r1.pass = r1.err.non_finite == 0 && r1.err.rel <= r1.tol;
  r1.time_us = TimeUs(lsm);
  r1.bytes = 2 * row_bytes;
  Record(r1);
  Row r2{"argmax", shape};
  r2.tol = 0;
  r2.pass = arg_bad == 0;
  r2.note = std::to_string(arg_bad) + " rows differ";
  r2.time_us = TimeUs(arg);
  r2.bytes = row_bytes;
  Record(r2);
  Row r3{"top_k", std::string(shape) + " k " + std::to_string(k)};
  r3.tol = 0;
  r3.pass = topk_bad == 0;
  r3.note = std::to_string(topk_bad) + " entries differ";
  r3.time_us = TimeUs(topk, 3, 9);
  r3.bytes = row_bytes;  // one pass counted; k passes run (mostly from L2)
  Record(r3);
  ArgmaxLseCase(logits, rows, n, shape);
}

// Whether a host/GPU disagreement is a rounding one: u * total, the top-p target or min-p lies
// within 1e-9 (relative) of a cumulative boundary of the host's own computation.
bool NearBoundary(const std::vector<float>& l, const cpu::SampleSpec& spec, double u) {
  const int n = static_cast<int>(l.size());
  const float mx = *std::max_element(l.begin(), l.end());
  const double inv_t = 1.0 / spec.temperature;
  std::vector<double> p(n);
  std::vector<int32_t> ids;
  constexpr double kRel = 1e-9;
  for (int i = 0; i < n; ++i) {
    p[i] = std::exp((l[i] - mx) * inv_t);
    if (spec.min_p > 0 && std::abs(p[i] - spec.min_p) <= kRel * spec.min_p) return true;
    if (p[i] > 0 && !(p[i] < spec.min_p)) ids.push_back(i);
  }
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  if (spec.top_k > 0 && spec.top_k < static_cast<int>(ids.size())) ids.resize(spec.top_k);
  double total = 0;
  for (int id : ids) total += p[id];
  if (spec.top_p < 1.0f) {
    const double target = spec.top_p * total;
    double cum = 0;
    size_t keep = 0;
    while (keep < ids.size()) {
      cum += p[ids[keep++]];
      if (std::abs(cum - target) <= kRel * total) return true;
      if (cum >= target) break;
    }
    ids.resize(keep);
  } else {
    std::sort(ids.begin(), ids.end());
  }
  double total2 = 0;
  for (int id : ids) total2 += p[id];
  double cum = 0;
  for (int id : ids) {
    cum += p[id];
    if (std::abs(cum - u * total2) <= kRel * total2) return true;
  }
  return false;
}

struct SampleMix {
  cuda::SampleRowSpec spec;
  bool penalties = false;
};

// Every mix of T {0, 0.5, 1, 1.5}, top_k {0, 1, 50, vocab}, top_p {0.5, 0.9, 1}, min_p {0, 0.1},
// penalties {off, on}: 192 rows.
std::vector<SampleMix> AllMixes(int vocab) {
  std::vector<SampleMix> mixes;
  for (float t : {0.0f, 0.5f, 1.0f, 1.5f})
    for (int k : {0, 1, 50, vocab})
      for (float tp : {0.5f, 0.9f, 1.0f})
        for (float mp : {0.0f, 0.1f})
          for (bool pen : {false, true}) {
            SampleMix m;
            m.spec.temperature = t;
            m.spec.top_k = k;
            m.spec.top_p = tp;
            m.spec.min_p = mp;
            if (pen) {
              m.spec.repetition_penalty = 1.3f;
              m.spec.frequency_penalty = 0.5f;
              m.spec.presence_penalty = 0.25f;
            }
            m.penalties = pen;
            mixes.push_back(m);
          }
  return mixes;
}

// rows x vocab logits (normal with a per-row scale 1..8; every 7th row bf16-rounded: many ties;
// row 3 all tied; row 5 a tied maximum), one mix per row (cycling), a u per row (a few at 0 and
// just below 1); GPU penalties + pick + restore against the host.
void SamplePickCase(int rows, int vocab) {
  std::mt19937_64 rng(NextSeed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    const float scale = 1.0f + 7.0f * static_cast<float>(r % 8) / 7.0f;
    float* row = logits.data() + static_cast<size_t>(r) * vocab;
    for (int i = 0; i < vocab; ++i) {
      row[i] = normal(rng) * scale;
      if (r % 7 == 6) row[i] = std::round(row[i] * 4.0f) / 4.0f;
    }
    if (r == 3) std::fill_n(row, vocab, 0.75f);
    if (r == 5) row[vocab / 2] = row[vocab - 1] = 40.0f;
  }
  const std::vector<SampleMix> mixes = AllMixes(vocab);
  std::vector<cuda::SampleRowSpec> specs(rows);
  std::vector<cuda::PenaltyRowEntry> entries;
  std::vector<std::vector<cpu::PenaltyEntry>> row_entries(rows);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (int r = 0; r < rows; ++r) {
    const SampleMix& mix = mixes[r % mixes.size()];
    specs[r] = mix.spec;
    specs[r].u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
    if (r % 61 == 1) specs[r].u = 0.0;
    if (r % 61 == 2) specs[r].u = std::nextafter(1.0, 0.0);
    if (!mix.penalties) continue;
    std::vector<int32_t> prompt(40), output(24);
    for (int32_t& x : prompt) x = token(rng);
    for (int32_t& x : output) x = token(rng) % std::max(1, vocab / 100);  // repeats
    prompt[0] = static_cast<int32_t>(std::max_element(logits.begin() + static_cast<size_t>(r) * vocab,
        logits.begin() + static_cast<size_t>(r + 1) * vocab) - logits.begin() - static_cast<size_t>(r) * vocab);
    row_entries[r] = cpu::MakePenaltyEntries(prompt, output, vocab);
    for (const auto& e : row_entries[r]) entries.push_back({r, e.token_id, e.output_count});
  }
  DevBuf<float> d_logits(logits.size()), d_saved(std::max<size_t>(entries.size(), 1));
  DevBuf<cuda::SampleRowSpec> d_specs(rows);
  DevBuf<cuda::PenaltyRowEntry> d_entries(std::max<size_t>(entries.size(), 1));
  DevBuf<int32_t> d_tokens(rows), d_status(rows);
  d_logits.Upload(logits);
  OC_CUDA(cudaMemcpy(d_specs.get(), specs.data(), rows * sizeof(specs[0]), cudaMemcpyHostToDevice));
  if (!entries.empty()) {
    OC_CUDA(cudaMemcpy(d_entries.get(), entries.data(), entries.size() * sizeof(entries[0]),
                       cudaMemcpyHostToDevice));
  }
  d_tokens.Poison();
  d_status.Poison();
  const int num_entries = static_cast<int>(entries.size());
  OC_OK(cuda::ApplyPenaltiesSaving(d_logits.get(), vocab, d_specs.get(), d_entries.get(),
                                   num_entries, d_saved.get(), nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const std::vector<float> g_penalized = d_logits.Download();
  OC_OK(cuda::SampleRows(d_logits.get(), vocab, rows, vocab, d_specs.get(), d_tokens.get(),
                         d_status.get(), nullptr));
  OC_OK(cuda::RestorePenalties(d_logits.get(), vocab, d_entries.get(), num_entries, d_saved.get(),
                               nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const std::vector<float> g_restored = d_logits.Download();
  const std::vector<int32_t> g_tokens = d_tokens.Download(), g_status = d_status.Download();

  long penalty_bad = 0, mismatch = 0, boundary = 0, to_host = 0, bad_status = 0;
  std::string first_bad;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + static_cast<size_t>(r) * vocab,
                           logits.begin() + static_cast<size_t>(r + 1) * vocab);
    const cuda::SampleRowSpec& s = specs[r];
    cpu::ApplyPenaltyEntries(row, row_entries[r], s.repetition_penalty, s.frequency_penalty,
                             s.presence_penalty);
    penalty_bad += std::memcmp(row.data(), g_penalized.data() + static_cast<size_t>(r) * vocab,
                               vocab * sizeof(float)) != 0;
    if (g_status[r] == cuda::kSampleNeedsHost) {
      ++to_host;
      continue;
    }
    if (g_status[r] != cuda::kSamplePicked) {
      ++bad_status;
      continue;
    }
    const cpu::SampleSpec spec{s.temperature, s.top_p, s.top_k, s.min_p};
    const int32_t want = cpu::SampleWithUniform(row, spec, s.u);
    if (g_tokens[r] == want) continue;
    if (s.temperature > 0 && NearBoundary(row, spec, s.u)) {
      ++boundary;
      continue;
    }
    if (++mismatch == 1) {
      char b[200];
      std::snprintf(b, sizeof(b), "; row %d (T %g k %d p %g min_p %g u %.17g): gpu %d host %d", r,
                    s.temperature, s.top_k, s.top_p, s.min_p, s.u, g_tokens[r], want);
      first_bad = b;
    }
  }
  const bool restored = std::memcmp(g_restored.data(), logits.data(), logits.size() * 4) == 0;
  char shape[96];
  std::snprintf(shape, sizeof(shape), "rows %d vocab %d, mixes cycled", rows, vocab);
  Row row{"sample_pick", shape};
  row.tol = 0;
  // Rounding disagreements must be rare (<= 1% of rows); none otherwise.
  row.pass = mismatch == 0 && bad_status == 0 && penalty_bad == 0 && restored &&
             boundary * 100 <= std::max(rows, 100);
  row.note = std::to_string(mismatch) + " picks differ, " + std::to_string(boundary) +
             " at a rounding boundary, " + std::to_string(to_host) + " rows left to the host, " +
             std::to_string(penalty_bad) + " penalized rows differ, logits " +
             (restored ? "restored" : "NOT restored") + first_bad;
  Record(row);
}

// The performance case: rows x vocab 151936, T 1, top_k 50, top_p 0.9 (and the plain T 1 draw).
void SamplePickTiming(int rows, int vocab) {
  DevBuf<float> d_logits(static_cast<size_t>(rows) * vocab);
  FillUniform(d_logits.get(), d_logits.size(), NextSeed(), -12.0f, 12.0f);
  DevBuf<cuda::SampleRowSpec> d_specs(rows);
  DevBuf<int32_t> d_tokens(rows), d_status(rows);
  for (int plain = 0; plain < 2; ++plain) {
    std::vector<cuda::SampleRowSpec> specs(rows);
    std::mt19937_64 rng(NextSeed());
    for (auto& s : specs) {
      s.temperature = 1.0f;
      s.top_k = plain ? 0 : 50;
      s.top_p = plain ? 1.0f : 0.9f;
      s.u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
    }
    OC_CUDA(cudaMemcpy(d_specs.get(), specs.data(), rows * sizeof(specs[0]), cudaMemcpyHostToDevice));
    auto run = [&] {
      OC_OK(cuda::SampleRows(d_logits.get(), vocab, rows, vocab, d_specs.get(), d_tokens.get(),
                             d_status.get(), nullptr));
    };
    run();
    OC_CUDA(cudaDeviceSynchronize());
    const auto logits = d_logits.Download();
    const auto tokens = d_tokens.Download(), status = d_status.Download();
    long bad = 0, host = 0;
    for (int r = 0; r < rows; ++r) {
      if (status[r] != cuda::kSamplePicked) { ++host; continue; }
      const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
      bad += tokens[r] != cpu::SampleWithUniform(row, {1.0f, specs[r].top_p, specs[r].top_k, 0.0f},
                                                 specs[r].u);
    }
    char shape[96];
    std::snprintf(shape, sizeof(shape), "rows %d vocab %d %s", rows, vocab,
                  plain ? "T 1 (plain draw)" : "T 1 top_k 50 top_p 0.9");
    Row row{"sample_pick", shape};
    row.tol = 0;
    row.pass = bad == 0 && host == 0;
    row.note = std::to_string(bad) + " picks differ, " + std::to_string(host) + " rows to the host";
    row.time_us = TimeUs(run, 3, 9);
    row.bytes = static_cast<double>(rows) * vocab * sizeof(float);  // one pass counted; 2-3 run
    Record(row);
  }
}

}  // namespace

void CheckSampling() {
  SamplePickCase(192, Small() ? 3001 : 151936);
  SamplePickCase(64, 97);  // a vocab below the block size
  if (!Small()) SamplePickTiming(256, 151936);
  if (!Small()) SamplingCase(64, 151936, 20);
  SamplingCase(3, 1000, 1000);  // k = n: a full sort
  SamplingCase(1, 151936, 1);
  SamplingCase(5, 20000, 4);  // split into few chunks, one row of -inf but two tied maxima
  CheckTokenBitmask();
}

}  // namespace tandem::opcheck
