// The embedded discovery: nothing to install, one machine. A directory per namespace holding one
// JSON file per instance:
//
//   <root>/<namespace>/<component>/<instance_id>.json
//     {"namespace","component","instance_id","endpoint","metadata",
//      "pid","host","expires_at_ms"}      (expires_at_ms: Unix time in ms, wall clock)
//
// Files are written atomically (temporary file + rename) and rewritten every `refresh` with
// expires_at_ms = now + ttl. List skips entries that expired, and entries of this host whose
// process is gone (no such pid, or a zombie), so a killed process disappears at once on its own
// host and within `ttl` elsewhere. List deletes the files of dead processes it finds.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "discovery/discovery.h"

namespace tandem::runtime {

struct FileDiscoveryOptions {
  std::string root;                         // empty: DefaultDiscoveryDir()
  std::chrono::milliseconds ttl{3000};      // a lease lives this long after its last refresh
  std::chrono::milliseconds refresh{1000};  // heartbeat period (< ttl)
};

// $TANDEM_DISCOVERY_DIR when set, else /tmp/tandem-discovery-<uid>.
std::string DefaultDiscoveryDir();

std::unique_ptr<Discovery> MakeFileDiscovery(FileDiscoveryOptions options = {});

}  // namespace tandem::runtime
