#include "grpc/convert.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "io/json.h"
#include "serving/repository.h"

namespace sluice::grpcfe {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;

template <typename Map>
std::vector<std::string> SortedKeys(const Map& m) {
  std::vector<std::string> keys;
  keys.reserve(m.size());
  for (const auto& kv : m) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  return keys;
}

void Double(io::JsonWriter* w, double v) {
  if (!std::isfinite(v)) {
    w->Null();
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  w->Raw(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

Status Utf8(std::string_view s, const std::string& path) {
  if (!simdjson::validate_utf8(s.data(), s.size())) {
    return io::FieldError(path, "is not valid UTF-8 text");
  }
  return Status::Ok();
}

// An input's header as both conversions check it: no per-input parameters, UTF-8 name and
// datatype.
Status CheckInputHeader(const inference::ModelInferRequest::InferInputTensor& in,
                        const std::string& path) {
  if (in.parameters_size() > 0) {
    return io::FieldError(path + ".parameters",
                          "is not supported (sluice takes no per-input parameters)");
  }
  RETURN_IF_ERROR(Utf8(in.name(), path + ".name"));
  return Utf8(in.datatype(), path + ".datatype");
}

// A parameters map as a JSON object (keys sorted, so that errors name them in one order).
Status WriteParameters(const google::protobuf::Map<std::string, InferParameter>& params,
                       const std::string& path, io::JsonWriter* w) {
  w->BeginObject();
  for (const std::string& k : SortedKeys(params)) {
    const InferParameter& p = params.at(k);
    const std::string at = path + "." + k;
    RETURN_IF_ERROR(Utf8(k, path));
    w->Key(k);
    switch (p.parameter_choice_case()) {
      case InferParameter::kBoolParam:
        w->Bool(p.bool_param());
        break;
      case InferParameter::kInt64Param:
        w->Int(p.int64_param());
        break;
      case InferParameter::kStringParam:
        RETURN_IF_ERROR(Utf8(p.string_param(), at));
        w->String(p.string_param());
        break;
      case InferParameter::kDoubleParam:
        Double(w, p.double_param());
        break;
      case InferParameter::kUint64Param:
        if (p.uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return io::FieldError(at, "is too large");
        }
        w->Int(static_cast<int64_t>(p.uint64_param()));
        break;
      case InferParameter::PARAMETER_CHOICE_NOT_SET:
        return io::FieldError(at, "has no value");
    }
  }
  w->EndObject();
  return Status::Ok();
}

// The contents field a datatype's data comes in.
enum class Field { kBool, kInt, kInt64, kUint, kUint64, kFp32, kFp64, kBytes, kNone };

Field FieldOf(const std::string& datatype) {
  if (datatype == "BOOL") return Field::kBool;
  if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32") return Field::kInt;
  if (datatype == "INT64") return Field::kInt64;
  if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") return Field::kUint;
  if (datatype == "UINT64") return Field::kUint64;
  if (datatype == "FP32") return Field::kFp32;
  if (datatype == "FP64") return Field::kFp64;
  if (datatype == "BYTES") return Field::kBytes;
  return Field::kNone;
}

const char* FieldName(Field f) {
  switch (f) {
    case Field::kBool:
      return "bool_contents";
    case Field::kInt:
      return "int_contents";
    case Field::kInt64:
      return "int64_contents";
    case Field::kUint:
      return "uint_contents";
    case Field::kUint64:
      return "uint64_contents";
    case Field::kFp32:
      return "fp32_contents";
    case Field::kFp64:
      return "fp64_contents";
    case Field::kBytes:
      return "bytes_contents";
    case Field::kNone:
      break;
  }
  return "";
}

int SizeOf(const InferTensorContents& c, Field f) {
  switch (f) {
    case Field::kBool:
      return c.bool_contents_size();
    case Field::kInt:
      return c.int_contents_size();
    case Field::kInt64:
      return c.int64_contents_size();
    case Field::kUint:
      return c.uint_contents_size();
    case Field::kUint64:
      return c.uint64_contents_size();
    case Field::kFp32:
      return c.fp32_contents_size();
    case Field::kFp64:
      return c.fp64_contents_size();
    case Field::kBytes:
      return c.bytes_contents_size();
    case Field::kNone:
      break;
  }
  return 0;
}

constexpr Field kAllFields[] = {Field::kBool,   Field::kInt,  Field::kInt64, Field::kUint,
                                Field::kUint64, Field::kFp32, Field::kFp64,  Field::kBytes};

// `contents` as a flat JSON array (w) or as a typed input's elements (t): one of the two.
Status WriteContents(const InferTensorContents& c, const std::string& datatype,
                     const std::string& path, io::JsonWriter* w, server::KServeInput* t) {
  const Field f = FieldOf(datatype);
  for (Field o : kAllFields) {
    if (o != f && SizeOf(c, o) > 0) {
      return io::FieldError(path, f == Field::kNone
                                      ? std::string("datatype \"") + datatype + "\" is not known"
                                      : std::string("datatype ") + datatype + " takes " +
                                            FieldName(f) + "; " + FieldName(o) + " is set");
    }
  }
  if (t) {
    // Typed: texts and integers are what the infer checks read; other datatypes are only
    // counted (refused there before their elements are read).
    t->count = static_cast<size_t>(f == Field::kNone ? 0 : SizeOf(c, f));
    switch (f) {
      case Field::kInt:
        t->ids.assign(c.int_contents().begin(), c.int_contents().end());
        break;
      case Field::kInt64:
        t->ids.assign(c.int64_contents().begin(), c.int64_contents().end());
        break;
      case Field::kUint:
        t->ids.assign(c.uint_contents().begin(), c.uint_contents().end());
        break;
      case Field::kUint64:
        t->ids.reserve(t->count);
        for (uint64_t v : c.uint64_contents()) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return io::FieldError(path + ".uint64_contents", "holds a value too large");
          }
          t->ids.push_back(static_cast<int64_t>(v));
        }
        break;
      case Field::kBytes: {
        int i = 0;
        t->texts.reserve(t->count);
        for (const std::string& s : c.bytes_contents()) {
          RETURN_IF_ERROR(Utf8(s, path + ".bytes_contents[" + std::to_string(i++) + "]"));
          t->texts.emplace_back(s);
        }
        break;
      }
      case Field::kBool:
      case Field::kFp32:
      case Field::kFp64:
      case Field::kNone:
        break;
    }
    return Status::Ok();
  }
  w->BeginArray();
  switch (f) {
    case Field::kBool:
      for (bool v : c.bool_contents()) w->Bool(v);
      break;
    case Field::kInt:
      for (int32_t v : c.int_contents()) w->Int(v);
      break;
    case Field::kInt64:
      for (int64_t v : c.int64_contents()) w->Int(v);
      break;
    case Field::kUint:
      for (uint32_t v : c.uint_contents()) w->Int(v);
      break;
    case Field::kUint64:
      for (uint64_t v : c.uint64_contents()) {
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return io::FieldError(path + ".uint64_contents", "holds a value too large");
        }
        w->Int(static_cast<int64_t>(v));
      }
      break;
    case Field::kFp32:
      for (float v : c.fp32_contents()) w->Float(v);
      break;
    case Field::kFp64:
      for (double v : c.fp64_contents()) Double(w, v);
      break;
    case Field::kBytes: {
      int i = 0;
      for (const std::string& s : c.bytes_contents()) {
        RETURN_IF_ERROR(Utf8(s, path + ".bytes_contents[" + std::to_string(i++) + "]"));
        w->String(s);
      }
      break;
    }
    case Field::kNone:
      break;
  }
  w->EndArray();
  return Status::Ok();
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian, as the protocol's raw data (x86, arm64)
  return v;
}

// One raw_input_contents entry as a flat JSON array (w) or a typed input's elements (t): one
// of the two.
Status WriteRaw(const std::string& raw, const std::string& datatype, const std::string& path,
                io::JsonWriter* w, server::KServeInput* t) {
  const Field f = FieldOf(datatype);
  size_t width = 0;
  if (f == Field::kBytes) {
    width = 0;
  } else if (datatype == "INT64" || datatype == "FP64") {
    width = 8;
  } else if (datatype == "INT32" || datatype == "FP32") {
    width = 4;
  } else if (datatype == "BOOL") {
    width = 1;
  } else {
    return io::FieldError(path, "raw data of datatype \"" + datatype +
                                    "\" is not supported (BYTES, INT64, INT32, FP32, FP64, BOOL)");
  }
  if (w) w->BeginArray();
  const char* p = raw.data();
  if (width == 0) {  // BYTES: 4-byte little-endian length, then the bytes
    size_t at = 0, i = 0;
    while (at < raw.size()) {
      if (raw.size() - at < 4) {
        return io::FieldError(path, "ends inside the length of element " + std::to_string(i));
      }
      const uint32_t n = Load<uint32_t>(p + at);
      at += 4;
      if (raw.size() - at < n) {
        return io::FieldError(path, "element " + std::to_string(i) + " is " + std::to_string(n) +
                                        " bytes; only " + std::to_string(raw.size() - at) +
                                        " are left");
      }
      const std::string_view s(p + at, n);
      RETURN_IF_ERROR(Utf8(s, path + "[" + std::to_string(i) + "]"));
      if (w) {
        w->String(s);
      } else {
        t->texts.push_back(s);
      }
      at += n;
      ++i;
    }
    if (t) t->count = i;
  } else {
    if (raw.size() % width != 0) {
      return io::FieldError(path, "holds " + std::to_string(raw.size()) +
                                      " bytes, not a multiple of " + std::to_string(width) + " (" +
                                      datatype + ")");
    }
    if (t) {
      t->count = raw.size() / width;
      if (datatype == "INT64" || datatype == "INT32") {
        t->ids.reserve(t->count);
        for (size_t at = 0; at < raw.size(); at += width) {
          t->ids.push_back(width == 8 ? Load<int64_t>(p + at) : Load<int32_t>(p + at));
        }
      }
      return Status::Ok();
    }
    for (size_t at = 0; at < raw.size(); at += width) {
      if (datatype == "INT64") {
        w->Int(Load<int64_t>(p + at));
      } else if (datatype == "INT32") {
        w->Int(Load<int32_t>(p + at));
      } else if (datatype == "FP32") {
        w->Float(Load<float>(p + at));
      } else if (datatype == "FP64") {
        Double(w, Load<double>(p + at));
      } else {
        w->Bool(p[at] != 0);
      }
    }
  }
  if (w) w->EndArray();
  return Status::Ok();
}

bool HasContents(const InferTensorContents& c) {
  return std::any_of(std::begin(kAllFields), std::end(kAllFields),
                     [&](Field f) { return SizeOf(c, f) > 0; });
}

Status CheckRepositoryName(const std::string& repository_name) {
  if (!repository_name.empty()) {
    return io::FieldError("repository_name",
                          "must be empty: sluice serves one repository (--model-repository)");
  }
  return Status::Ok();
}

StatusOr<simdjson::dom::element> ParseAny(std::string_view json) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element e;
  if (auto err = parser.parse(json.data(), json.size()).get(e)) {
    return Internal(std::string("unexpected response from the router: ") +
                    simdjson::error_message(err));
  }
  return e;
}

Status Bad(const char* what) {
  return Internal(std::string("unexpected router response: ") + what);
}

std::string GetString(simdjson::dom::object o, const char* key) {
  std::string_view s;
  if (o[key].get(s)) return "";
  return std::string(s);
}

Status ReadTensorMeta(simdjson::dom::element e,
                      inference::ModelMetadataResponse::TensorMetadata* t) {
  simdjson::dom::object o;
  simdjson::dom::array shape;
  if (e.get(o) || o["shape"].get(shape)) return Bad("tensor metadata");
  t->set_name(GetString(o, "name"));
  t->set_datatype(GetString(o, "datatype"));
  for (auto d : shape) {
    int64_t v = 0;
    if (d.get(v)) return Bad("tensor shape");
    t->add_shape(v);
  }
  return Status::Ok();
}

}  // namespace

grpc::StatusCode CodeOfHttp(int s) {
  switch (s) {
    case 200:
      return grpc::StatusCode::OK;
    case 400:
    case 422:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 408:
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 413:
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    case 501:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return s >= 400 && s < 500 ? grpc::StatusCode::FAILED_PRECONDITION
                                 : grpc::StatusCode::INTERNAL;
  }
}

std::string ErrorMessage(std::string_view body) {
  auto e = ParseAny(body);
  if (e.ok()) {
    std::string_view m;
    if (!(*e)["error"].get(m)) return std::string(m);
    if (!(*e)["error"]["message"].get(m)) return std::string(m);
  }
  return std::string(body);
}

grpc::Status StatusOfHttp(const server::HttpResponse& r) {
  return grpc::Status(CodeOfHttp(r.status), ErrorMessage(r.body));
}

grpc::Status StatusOf(const Status& s) {
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnsupported:
      c = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kFailedPrecondition:
      c = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kNotFound:
      c = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kResourceExhausted:
      c = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kUnavailable:
      c = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kInternal:
      c = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(c, s.message());
}

StatusOr<std::optional<int64_t>> ModelVersion(const std::string& name, const std::string& version) {
  if (name.empty()) return io::FieldError("name", "is required (the model's name)");
  RETURN_IF_ERROR(serving::ValidateName(name));
  if (version.empty()) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t v, serving::ParseVersion(version));
  return std::optional<int64_t>(v);
}

StatusOr<std::string> ModelPath(const std::string& name, const std::string& version) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, ModelVersion(name, version));
  std::string path = "/v2/models/" + name;
  if (v) path += "/versions/" + std::to_string(*v);
  return path;
}

Status ReadInferRequest(const inference::ModelInferRequest& req, server::KServeRequest* out,
                        bool* raw) {
  // The checks of InferRequestJson, in its order.
  *raw = req.raw_input_contents_size() > 0;
  if (*raw && req.raw_input_contents_size() != req.inputs_size()) {
    return io::FieldError("raw_input_contents",
                          "holds " + std::to_string(req.raw_input_contents_size()) +
                              " entries; there are " + std::to_string(req.inputs_size()) +
                              " inputs (one entry per input, in order)");
  }
  if (!req.id().empty()) {
    RETURN_IF_ERROR(Utf8(req.id(), "id"));
    out->id = req.id();
  }
  if (req.parameters_size() > 0) {
    // The parameters as the HTTP body has them, for the infer route's checks of them (a
    // handful of values: their JSON form keeps every conversion the same).
    io::JsonWriter w;
    RETURN_IF_ERROR(WriteParameters(req.parameters(), "parameters", &w));
    out->parameters_json = w.Take();
    out->parameters_doc = std::make_shared<simdjson::dom::parser>();
    simdjson::dom::element e;
    if (out->parameters_doc->parse(out->parameters_json).get(e)) {
      return Internal("parameters: not valid JSON");
    }
    out->parameters = e;
  }
  out->inputs.resize(static_cast<size_t>(req.inputs_size()));
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    const std::string path = "inputs[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(CheckInputHeader(in, path));
    server::KServeInput& t = out->inputs[static_cast<size_t>(i)];
    t.name = in.name();
    t.datatype = in.datatype();
    t.shape.assign(in.shape().begin(), in.shape().end());
    if (*raw) {
      if (HasContents(in.contents())) {
        return io::FieldError(path + ".contents",
                              "must be empty when the request carries raw_input_contents");
      }
      RETURN_IF_ERROR(WriteRaw(req.raw_input_contents(i), in.datatype(),
                               "raw_input_contents[" + std::to_string(i) + "]", nullptr, &t));
    } else {
      RETURN_IF_ERROR(WriteContents(in.contents(), in.datatype(), path + ".contents", nullptr, &t));
    }
  }
  for (int i = 0; i < req.outputs_size(); ++i) {
    const auto& o = req.outputs(i);
    const std::string path = "outputs[" + std::to_string(i) + "]";
    if (o.parameters_size() > 0) {
      return io::FieldError(path + ".parameters",
                            "is not supported (sluice takes no per-output parameters)");
    }
    RETURN_IF_ERROR(Utf8(o.name(), path + ".name"));
    out->outputs.push_back(o.name());
  }
  return Status::Ok();
}

void FillInferResponse(const server::KServeResponse& r, bool raw,
                       inference::ModelInferResponse* out) {
  out->set_model_name(r.model_name);
  out->set_model_version(r.model_version);
  out->set_id(r.id);
  for (const server::KServeOutput& o : r.outputs) {
    auto* ot = out->add_outputs();
    ot->set_name(o.name);
    ot->set_datatype(o.datatype);
    for (int64_t d : o.shape) ot->add_shape(d);
    std::string* bytes = raw ? out->add_raw_output_contents() : nullptr;
    if (o.datatype == "FP32") {
      // Non-finite values as quiet NaN (the JSON form's null).
      auto value = [](float f) {
        return std::isfinite(f) ? f : std::numeric_limits<float>::quiet_NaN();
      };
      if (bytes) {
        bytes->resize(o.fp32.size() * 4);
        for (size_t i = 0; i < o.fp32.size(); ++i) {
          const float f = value(o.fp32[i]);
          std::memcpy(bytes->data() + i * 4, &f, 4);
        }
      } else if (!o.fp32.empty()) {  // (no data: no contents message, as from JSON)
        auto* c = ot->mutable_contents()->mutable_fp32_contents();
        c->Reserve(static_cast<int>(o.fp32.size()));
        for (float f : o.fp32) c->Add(value(f));
      }
    } else {
      if (bytes) {
        bytes->resize(o.int64.size() * 8);
        if (!o.int64.empty()) std::memcpy(bytes->data(), o.int64.data(), o.int64.size() * 8);
      } else if (!o.int64.empty()) {
        ot->mutable_contents()->mutable_int64_contents()->Add(o.int64.begin(), o.int64.end());
      }
    }
  }
}

StatusOr<std::string> InferRequestJson(const inference::ModelInferRequest& req, bool* raw) {
  *raw = req.raw_input_contents_size() > 0;
  if (*raw && req.raw_input_contents_size() != req.inputs_size()) {
    return io::FieldError("raw_input_contents",
                          "holds " + std::to_string(req.raw_input_contents_size()) +
                              " entries; there are " + std::to_string(req.inputs_size()) +
                              " inputs (one entry per input, in order)");
  }
  io::JsonWriter w;
  w.BeginObject();
  if (!req.id().empty()) {
    RETURN_IF_ERROR(Utf8(req.id(), "id"));
    w.KeyString("id", req.id());
  }
  if (req.parameters_size() > 0) {
    w.Key("parameters");
    RETURN_IF_ERROR(WriteParameters(req.parameters(), "parameters", &w));
  }
  w.Key("inputs");
  w.BeginArray();
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    const std::string path = "inputs[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(CheckInputHeader(in, path));
    w.BeginObject();
    w.KeyString("name", in.name());
    w.KeyString("datatype", in.datatype());
    w.Key("shape");
    w.BeginArray();
    for (int64_t d : in.shape()) w.Int(d);
    w.EndArray();
    w.Key("data");
    if (*raw) {
      if (HasContents(in.contents())) {
        return io::FieldError(path + ".contents",
                              "must be empty when the request carries raw_input_contents");
      }
      RETURN_IF_ERROR(WriteRaw(req.raw_input_contents(i), in.datatype(),
                               "raw_input_contents[" + std::to_string(i) + "]", &w, nullptr));
    } else {
      RETURN_IF_ERROR(WriteContents(in.contents(), in.datatype(), path + ".contents", &w, nullptr));
    }
    w.EndObject();
  }
  w.EndArray();
  if (req.outputs_size() > 0) {
    w.Key("outputs");
    w.BeginArray();
    for (int i = 0; i < req.outputs_size(); ++i) {
      const auto& o = req.outputs(i);
      const std::string path = "outputs[" + std::to_string(i) + "]";
      if (o.parameters_size() > 0) {
        return io::FieldError(path + ".parameters",
                              "is not supported (sluice takes no per-output parameters)");
      }
      RETURN_IF_ERROR(Utf8(o.name(), path + ".name"));
      w.BeginObject();
      w.KeyString("name", o.name());
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  return w.Take();
}

Status InferResponseFromJson(std::string_view json, bool raw, inference::ModelInferResponse* out) {
  ASSIGN_OR_RETURN(simdjson::dom::element e, ParseAny(json));
  simdjson::dom::object o;
  simdjson::dom::array outputs;
  if (e.get(o) || o["outputs"].get(outputs)) return Bad("infer response");
  out->set_model_name(GetString(o, "model_name"));
  out->set_model_version(GetString(o, "model_version"));
  out->set_id(GetString(o, "id"));
  for (auto t : outputs) {
    simdjson::dom::object to;
    simdjson::dom::array shape, data;
    if (t.get(to) || to["shape"].get(shape) || to["data"].get(data)) return Bad("output tensor");
    auto* ot = out->add_outputs();
    ot->set_name(GetString(to, "name"));
    ot->set_datatype(GetString(to, "datatype"));
    for (auto d : shape) {
      int64_t v = 0;
      if (d.get(v)) return Bad("output shape");
      ot->add_shape(v);
    }
    std::string* bytes = raw ? out->add_raw_output_contents() : nullptr;
    if (ot->datatype() == "FP32") {
      if (bytes) bytes->reserve(data.size() * 4);
      for (auto x : data) {
        float f = std::numeric_limits<float>::quiet_NaN();  // null: a non-finite value
        if (!x.is_null()) {
          double v = 0;
          if (x.get(v)) return Bad("FP32 data");
          f = static_cast<float>(v);
        }
        if (bytes) {
          bytes->append(reinterpret_cast<const char*>(&f), 4);
        } else {
          ot->mutable_contents()->add_fp32_contents(f);
        }
      }
    } else if (ot->datatype() == "INT64") {
      if (bytes) bytes->reserve(data.size() * 8);
      for (auto x : data) {
        int64_t v = 0;
        if (x.get(v)) return Bad("INT64 data");
        if (bytes) {
          bytes->append(reinterpret_cast<const char*>(&v), 8);
        } else {
          ot->mutable_contents()->add_int64_contents(v);
        }
      }
    } else {
      return Bad("output datatype");
    }
  }
  return Status::Ok();
}

Status MetadataFromJson(std::string_view json, inference::ModelMetadataResponse* out) {
  ASSIGN_OR_RETURN(simdjson::dom::element e, ParseAny(json));
  simdjson::dom::object o;
  simdjson::dom::array versions, inputs, outputs;
  if (e.get(o) || o["versions"].get(versions) || o["inputs"].get(inputs) ||
      o["outputs"].get(outputs)) {
    return Bad("model metadata");
  }
  out->set_name(GetString(o, "name"));
  out->set_platform(GetString(o, "platform"));
  for (auto v : versions) {
    std::string_view s;
    if (v.get(s)) return Bad("model versions");
    out->add_versions(std::string(s));
  }
  for (auto t : inputs) RETURN_IF_ERROR(ReadTensorMeta(t, out->add_inputs()));
  for (auto t : outputs) RETURN_IF_ERROR(ReadTensorMeta(t, out->add_outputs()));
  return Status::Ok();
}

Status ServerMetadataFromJson(std::string_view json, inference::ServerMetadataResponse* out) {
  ASSIGN_OR_RETURN(simdjson::dom::element e, ParseAny(json));
  simdjson::dom::object o;
  simdjson::dom::array ext;
  if (e.get(o) || o["extensions"].get(ext)) return Bad("server metadata");
  out->set_name(GetString(o, "name"));
  out->set_version(GetString(o, "version"));
  for (auto x : ext) {
    std::string_view s;
    if (x.get(s)) return Bad("server extensions");
    out->add_extensions(std::string(s));
  }
  return Status::Ok();
}

Status IndexFromJson(std::string_view json, inference::RepositoryIndexResponse* out) {
  ASSIGN_OR_RETURN(simdjson::dom::element e, ParseAny(json));
  simdjson::dom::array a;
  if (e.get(a)) return Bad("repository index");
  for (auto x : a) {
    simdjson::dom::object o;
    if (x.get(o)) return Bad("repository index entry");
    auto* m = out->add_models();
    m->set_name(GetString(o, "name"));
    m->set_version(GetString(o, "version"));
    m->set_state(GetString(o, "state"));
    m->set_reason(GetString(o, "reason"));
  }
  return Status::Ok();
}

StatusOr<std::string> IndexRequestJson(const inference::RepositoryIndexRequest& req) {
  RETURN_IF_ERROR(CheckRepositoryName(req.repository_name()));
  return std::string(req.ready() ? "{\"ready\":true}" : "{}");
}

StatusOr<std::string> LoadRequestJson(const inference::RepositoryModelLoadRequest& req) {
  RETURN_IF_ERROR(CheckRepositoryName(req.repository_name()));
  if (req.parameters_size() == 0) return std::string("{}");
  io::JsonWriter w;
  w.BeginObject();
  w.Key("parameters");
  w.BeginObject();
  for (const std::string& k : SortedKeys(req.parameters())) {
    const auto& p = req.parameters().at(k);
    if (k != "config") {
      RETURN_IF_ERROR(Utf8(k, "parameters"));
      return io::FieldError("parameters." + k,
                            "is not supported (the one load parameter is \"config\")");
    }
    if (p.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam) {
      return io::FieldError("parameters.config",
                            "must be a string_param holding a model.json object");
    }
    RETURN_IF_ERROR(Utf8(p.string_param(), "parameters.config"));
    w.KeyString("config", p.string_param());
  }
  w.EndObject();
  w.EndObject();
  return w.Take();
}

Status CheckUnloadRequest(const inference::RepositoryModelUnloadRequest& req) {
  RETURN_IF_ERROR(CheckRepositoryName(req.repository_name()));
  if (req.parameters_size() > 0) {
    const std::string k = SortedKeys(req.parameters()).front();
    RETURN_IF_ERROR(Utf8(k, "parameters"));
    return io::FieldError("parameters." + k, "is not supported (unload takes no parameters)");
  }
  return Status::Ok();
}

}  // namespace sluice::grpcfe
