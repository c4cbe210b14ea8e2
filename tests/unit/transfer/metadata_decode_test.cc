// transfer/metadata.h: DecodeMetadata of bytes from a peer fails cleanly, whatever they are.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "transfer/metadata.h"

namespace tandem::transfer {
namespace {

TEST(MetadataDecode, RoundTrip) {
  AgentMetadata md;
  md.name = "decode-0";
  md.instance_id = "i1";
  md.backends["tcp"] = "127.0.0.1:1";
  md.regions.push_back({4096, 8192, MemoryKind::kHost, 0, {{"ucx", std::string("\0\1", 2)}}});
  auto back = DecodeMetadata(EncodeMetadata(md));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "decode-0");
  EXPECT_EQ(back->backends, md.backends);
  ASSERT_EQ(back->regions.size(), 1u);
  EXPECT_EQ(back->regions[0].backend_info, md.regions[0].backend_info);
}

// Found by tests/fuzz/fabric_control_fuzz: a CBOR array (or map) header claiming more elements
// than can exist made nlohmann's from_cbor throw out_of_range.408 although exceptions were off;
// the exception left DecodeMetadata and ended the process.
TEST(MetadataDecode, ExcessiveContainerSizeIsDataLoss) {
  for (std::string bytes : {std::string("\x9b\x7f\xff\xff\xff\xff\xff\xff\xff", 9),
                            std::string("\xbb\x7f\xff\xff\xff\xff\xff\xff\xff", 9),
                            std::string("\xa1\x67version\x9b\x39\x61\x11\x11\x11\x11\x11\x11", 18)}) {
    Result<AgentMetadata> md{AgentMetadata{}};
    ASSERT_NO_THROW(md = DecodeMetadata(bytes));
    ASSERT_FALSE(md.ok());
    EXPECT_EQ(md.status().code(), StatusCode::kDataLoss) << md.status().ToString();
  }
  // The fuzzer's own input (after the target's selector byte).
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) /
                       "tests/fuzz/corpus/fabric_control/regress-metadata-excessive-array-size",
                   std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  Result<AgentMetadata> md{AgentMetadata{}};
  ASSERT_NO_THROW(md = DecodeMetadata(ss.str().substr(1)));
  EXPECT_FALSE(md.ok());
}

}  // namespace
}  // namespace tandem::transfer
