// The one place where errors become HTTP: Status codes map to status codes and the JSON
// body {"error": {"message", "type", "code"}}.
#pragma once

#include <string>

#include "server/http_types.h"
#include "sluice/status.h"

namespace sluice::server {

// An error response with an explicit HTTP status (401, 404, 405, 413, ...).
HttpResponse ErrorResponse(int http_status, const std::string& message);
// InvalidArgument/OutOfRange/FailedPrecondition/Unsupported -> 400, NotFound -> 404,
// ResourceExhausted -> 429 (+ Retry-After), Unavailable -> 503, Internal -> 500.
HttpResponse StatusResponse(const Status& status);

}  // namespace sluice::server
