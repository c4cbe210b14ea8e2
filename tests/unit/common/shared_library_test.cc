// LazySharedLibrary (common/shared_library.h): opens on first use, resolves symbols through the
// library's dependencies, and a missing library or symbol is an error naming it with dlerror()'s
// text, kept for later calls.
#include "common/shared_library.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace tandem {
namespace {

TEST(SharedLibraryTest, OpensOnFirstUseAndResolves) {
  LazySharedLibrary lib("libc.so.6", "the C library");
  EXPECT_FALSE(lib.loaded());
  const char* names[] = {"strlen", "memcpy"};
  Status st = lib.Load(names, 2);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(lib.loaded());
  auto fn = reinterpret_cast<size_t (*)(const char*)>(lib.Symbol("strlen"));
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn("four"), 4u);
  EXPECT_STREQ(lib.error(), "");
}

TEST(SharedLibraryTest, MissingSymbolIsAnErrorNamingIt) {
  LazySharedLibrary lib("libc.so.6", "the C library");
  const char* names[] = {"strlen", "tandem_no_such_function"};
  Status st = lib.Load(names, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("libc.so.6 (the C library) has no symbol tandem_no_such_function"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(lib.loaded());  // the library itself is open
  EXPECT_EQ(std::string(lib.error()), st.message());
}

TEST(SharedLibraryTest, MissingLibraryIsAnErrorNamingItAndTheLoadersText) {
  LazySharedLibrary lib("libtandem-no-such-library.so.3", "a test library");
  EXPECT_EQ(lib.Handle(), nullptr);
  EXPECT_EQ(lib.Symbol("anything"), nullptr);
  EXPECT_FALSE(lib.loaded());
  const char* names[] = {"anything"};
  Status st = lib.Load(names, 1);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find("could not load libtandem-no-such-library.so.3 (a test library)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cannot open shared object file"), std::string::npos) << m;
  EXPECT_EQ(std::string(lib.error()), m);  // kept: the open is not retried
  Result<void*> h = OpenSharedLibrary("libtandem-no-such-library.so.3", "a test library");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), m);
}

TEST(SharedLibraryTest, ALongErrorIsCutToTheCapacity) {
  static const std::string soname = "libtandem-" + std::string(600, 'x') + ".so";
  LazySharedLibrary lib(soname.c_str(), "a test library");
  EXPECT_EQ(lib.Handle(), nullptr);
  const std::string e = lib.error();
  EXPECT_EQ(e.size(), LazySharedLibrary::kErrorCapacity - 1);
  EXPECT_EQ(e.rfind("could not load libtandem-xxx", 0), 0u) << e.substr(0, 80);
}

}  // namespace
}  // namespace tandem
