#include "server/errors.h"

#include "io/json.h"

namespace sluice::server {
namespace {

const char* ErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

HttpResponse ErrorResponse(int http_status, const std::string& message) {
  io::JsonWriter w;
  w.BeginObject();
  w.Key("error");
  w.BeginObject();
  w.Key("message");
  w.String(message);
  w.Key("type");
  w.String(ErrorType(http_status));
  w.Key("code");
  w.Int(http_status);
  w.EndObject();
  w.EndObject();
  HttpResponse r;
  r.status = http_status;
  r.body = w.Take();
  if (http_status == 429 || http_status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse StatusResponse(const Status& s) {
  int code = 500;
  switch (s.code()) {
    case StatusCode::kOk:
      code = 200;
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnsupported:
      code = 400;
      break;
    case StatusCode::kNotFound:
      code = 404;
      break;
    case StatusCode::kResourceExhausted:
      code = 429;
      break;
    case StatusCode::kUnavailable:
      code = 503;
      break;
    case StatusCode::kInternal:
      code = 500;
      break;
  }
  return ErrorResponse(code, s.message());
}

}  // namespace sluice::server
