// UCX and libfabric opened on first use (transfer/ucx_loader.h, libfabric_loader.h): nothing of
// them is mapped before a backend of theirs is made, and loading resolves every forwarded
// function. ctest runs each test in its own process (gtest_discover_tests), so "before" means
// this process.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#ifdef TANDEM_HAVE_UCX
#include "transfer/ucx_loader.h"
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
#include "transfer/libfabric_loader.h"
#endif

namespace tandem::transfer {
namespace {

[[maybe_unused]] bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

#ifdef TANDEM_HAVE_UCX
TEST(TransferLoaderTest, UcxOpenedOnFirstUse) {
  if (!UcxLoaded()) {
    EXPECT_FALSE(Mapped("/libucp.so")) << "libucp mapped before any ucx backend";
    EXPECT_FALSE(Mapped("/libucs.so")) << "libucs mapped before any ucx backend";
  }
  Status st = LoadUcx();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(UcxLoaded());
  EXPECT_TRUE(Mapped("/libucp.so"));
  EXPECT_TRUE(LoadUcx().ok());  // once
}
#endif

#ifdef TANDEM_HAVE_LIBFABRIC
TEST(TransferLoaderTest, LibfabricOpenedOnFirstUse) {
  if (!LibfabricLoaded()) {
    EXPECT_FALSE(Mapped("/libfabric.so")) << "libfabric mapped before any libfabric backend";
  }
  Status st = LoadLibfabric();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(LibfabricLoaded());
  EXPECT_TRUE(Mapped("/libfabric.so"));
  EXPECT_TRUE(LoadLibfabric().ok());
}
#endif

}  // namespace
}  // namespace tandem::transfer
