// A blocking HTTP/1.1 GET over plain TCP (Boost.Beast), for the planner's scrapes of /metrics.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace tandem::planner {

// GET http://host:port<target>: the body of a 200 answer. FailedPrecondition (no connection, a timeout
// over the whole exchange), or Internal naming the status of any other answer.
Result<std::string> HttpGet(const std::string& host, int port, const std::string& target,
                            std::chrono::milliseconds timeout);

}  // namespace tandem::planner
