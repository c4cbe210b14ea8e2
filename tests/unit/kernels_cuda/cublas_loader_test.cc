// cuBLAS opened on first use (kernels/cuda/cublas_loader.h), without a GPU: nothing of libcublas is
// mapped before the first cuBLAS call, LoadCublas opens both libraries and resolves every forwarded
// entry point (a library that cannot be opened: SharedLibraryTest, common/shared_library.h).
// ctest runs each test in its own process (gtest_discover_tests), so "before" means this process.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kernels/cuda/cublas_loader.h"

namespace tandem::cuda {
namespace {

bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLoaderTest, OpensTheLibrariesOnFirstUseAndResolvesEveryEntryPoint) {
  if (!CublasLoaded()) {
    EXPECT_FALSE(Mapped("libcublas")) << "libcublas mapped before any cuBLAS call";
  }
  Status st = LoadCublas();
  if (!st.ok() && st.message().find("cannot open shared object file") != std::string::npos) {
    GTEST_SKIP() << "no cuBLAS on this machine: " << st.message();
  }
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(CublasLoaded());
  EXPECT_TRUE(Mapped("libcublas.so"));
  EXPECT_TRUE(Mapped("libcublasLt.so"));
  // Forwarded to the library's own text ("success" in cuBLAS 13).
  std::string text = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(text.find("uccess"), std::string::npos) << text;
}

}  // namespace
}  // namespace tandem::cuda
