// cuda_op_check: every CUDA op of src/kernels/cuda against its CPU reference (src/kernels/cpu) on
// fresh random inputs, plus timings. Usage: cuda_op_check [--seed N] [--small] [--only OP_GROUP[,OP_GROUP...]]
// --small: only the small and odd shapes, untimed (quick enough for compute-sanitizer).
// Exit: 0 all checks pass, 1 a check failed, 2 a CUDA error, 77 no CUDA device.
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <string>

#include "op_check_util.h"

int main(int argc, char** argv) {
  using namespace tandem::opcheck;
  uint64_t seed = std::random_device{}();
  seed = (seed << 32) ^ static_cast<uint64_t>(std::time(nullptr));
  const char* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--small") == 0) {
      SetSmall(true);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--seed N] [--small] [--only embedding|rms_norm|qk_norm_rope|silu_mul|"
                   "reshape_and_cache|prefill|decode|linear|fp8|kv_fp8|sampling|kv_copy]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda_op_check: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  OC_CUDA(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  OC_CUDA(cudaDriverGetVersion(&driver));
  OC_CUDA(cudaRuntimeGetVersion(&runtime));
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MB; driver %d, runtime %d\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize / 1e6, driver, runtime);
  std::printf("seed: %llu (rerun with --seed to reproduce)\n", static_cast<unsigned long long>(seed));
  std::printf("tolerances: exact for copies (embedding, reshape_and_cache, argmax, top_k); "
              "rel 1e-2 for bf16 outputs; rel 1e-5 for fp32 log_softmax\n");
  std::printf("timings: median over batches of launches after warm-up (CUDA events); inputs "
              "smaller than the 50 MB L2 stay cached between reps\n\n");
  SetBaseSeed(seed);

  struct Group {
    const char* name;
    void (*fn)();
  };
  const Group groups[] = {
      {"embedding", CheckEmbedding},       {"rms_norm", CheckRmsNorm},
      {"qk_norm_rope", CheckQkNormRope},   {"silu_mul", CheckSiluMul},
      {"reshape_and_cache", CheckReshapeAndCache}, {"prefill", CheckPagedPrefill},
      {"decode", CheckPagedDecode},        {"linear", CheckLinear},
      {"fp8", CheckFp8},                   {"kv_fp8", CheckKvFp8},
      {"sampling", CheckSampling},         {"kv_copy", CheckKvBlockCopy},
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (const Group& g : groups) {
    // --only takes one group or a comma-separated list of them.
    if (only != nullptr && ("," + std::string(only) + ",").find("," + std::string(g.name) + ",") == std::string::npos) {
      continue;
    }
    const auto g0 = std::chrono::steady_clock::now();
    g.fn();
    OC_CUDA(cudaDeviceSynchronize());
    std::printf("  [%s: %.1f s]\n", g.name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count());
  }
  const int failed = PrintTable();
  std::printf("total %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return failed == 0 ? 0 : 1;
}
