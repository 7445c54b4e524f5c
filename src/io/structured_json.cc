#include "io/structured_json.h"

#include <string>
#include <vector>

namespace sluice::io {
namespace {

using structured::ConstraintSpec;

Status SchemaText(simdjson::dom::element e, const std::string& field, std::string* out) {
  std::string_view s;
  if (e.type() == simdjson::dom::element_type::OBJECT ||
      e.type() == simdjson::dom::element_type::BOOL) {
    *out = simdjson::minify(e);
    return Status::Ok();
  }
  if (!e.get(s)) {  // a JSON Schema sent as a string (vLLM accepts both)
    *out = std::string(s);
    return Status::Ok();
  }
  return FieldError(field, "must be a JSON Schema (an object)");
}

Status StringField(simdjson::dom::element e, const std::string& field, std::string* out) {
  std::string_view s;
  if (e.get(s)) return FieldError(field, "must be a string");
  *out = std::string(s);
  return Status::Ok();
}

Status Choices(simdjson::dom::element e, const std::string& field, std::vector<std::string>* out) {
  simdjson::dom::array arr;
  if (e.get(arr) || arr.size() == 0)
    return FieldError(field, "must be a non-empty list of strings");
  for (auto x : arr) {
    std::string_view s;
    if (x.get(s)) return FieldError(field, "must be a non-empty list of strings");
    out->emplace_back(s);
  }
  return Status::Ok();
}

}  // namespace

Status ReadStructuredFields(Fields& f, SamplingParams* p) {
  std::vector<ConstraintSpec> found;
  std::optional<std::string> ws;
  std::string ws_field;
  simdjson::dom::element e;

  if (f.Get("response_format", &e)) {
    simdjson::dom::object o;
    if (e.get(o)) return FieldError("response_format", "must be an object");
    Fields rf(o, "response_format");
    std::string type;
    RETURN_IF_ERROR(rf.GetString("type", &type));
    if (type == "json_object") {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kJsonObject;
      c.field = "response_format";
      found.push_back(std::move(c));
    } else if (type == "json_schema") {
      simdjson::dom::element js;
      simdjson::dom::object jo;
      if (!rf.Get("json_schema", &js) || js.get(jo)) {
        return FieldError("response_format.json_schema",
                          "is required: {\"name\", \"schema\", \"strict\"}");
      }
      Fields jf(jo, "response_format.json_schema");
      std::string name, description;
      RETURN_IF_ERROR(jf.GetString("name", &name));
      RETURN_IF_ERROR(jf.GetString("description", &description));
      bool strict = false;
      RETURN_IF_ERROR(jf.GetBool("strict", &strict));  // every schema is enforced strictly
      simdjson::dom::element schema;
      if (!jf.Get("schema", &schema))
        return FieldError("response_format.json_schema.schema", "is required");
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kJsonSchema;
      c.field = "response_format.json_schema.schema";
      RETURN_IF_ERROR(SchemaText(schema, c.field, &c.text));
      RETURN_IF_ERROR(jf.CheckNoUnknown());
      found.push_back(std::move(c));
    } else if (type != "text") {
      return FieldError("response_format.type",
                        "must be \"text\", \"json_object\" or \"json_schema\"");
    }
    RETURN_IF_ERROR(rf.CheckNoUnknown());
  }

  if (f.Get("structured_outputs", &e)) {
    simdjson::dom::object o;
    if (e.get(o)) return FieldError("structured_outputs", "must be an object");
    Fields so(o, "structured_outputs");
    simdjson::dom::element x;
    size_t before = found.size();
    if (so.Get("json", &x)) {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kJsonSchema;
      c.field = "structured_outputs.json";
      RETURN_IF_ERROR(SchemaText(x, c.field, &c.text));
      found.push_back(std::move(c));
    }
    if (so.Get("regex", &x)) {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kRegex;
      c.field = "structured_outputs.regex";
      RETURN_IF_ERROR(StringField(x, c.field, &c.text));
      found.push_back(std::move(c));
    }
    if (so.Get("choice", &x)) {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kChoice;
      c.field = "structured_outputs.choice";
      RETURN_IF_ERROR(Choices(x, c.field, &c.choices));
      found.push_back(std::move(c));
    }
    if (so.Get("grammar", &x)) {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kGrammar;
      c.field = "structured_outputs.grammar";
      RETURN_IF_ERROR(StringField(x, c.field, &c.text));
      found.push_back(std::move(c));
    }
    bool json_object = false;
    RETURN_IF_ERROR(so.GetBool("json_object", &json_object));
    if (json_object) {
      ConstraintSpec c;
      c.kind = ConstraintSpec::Kind::kJsonObject;
      c.field = "structured_outputs.json_object";
      found.push_back(std::move(c));
    }
    if (so.Get("whitespace_pattern", &x)) {
      std::string w;
      RETURN_IF_ERROR(StringField(x, "structured_outputs.whitespace_pattern", &w));
      ws = w;
      ws_field = "structured_outputs.whitespace_pattern";
    }
    RETURN_IF_ERROR(so.CheckNoUnknown());
    if (found.size() == before) {
      return FieldError("structured_outputs",
                        "needs one of json, regex, choice, grammar, json_object");
    }
  }

  if (f.Get("guided_json", &e)) {
    ConstraintSpec c;
    c.kind = ConstraintSpec::Kind::kJsonSchema;
    c.field = "guided_json";
    RETURN_IF_ERROR(SchemaText(e, c.field, &c.text));
    found.push_back(std::move(c));
  }
  if (f.Get("guided_regex", &e)) {
    ConstraintSpec c;
    c.kind = ConstraintSpec::Kind::kRegex;
    c.field = "guided_regex";
    RETURN_IF_ERROR(StringField(e, c.field, &c.text));
    found.push_back(std::move(c));
  }
  if (f.Get("guided_choice", &e)) {
    ConstraintSpec c;
    c.kind = ConstraintSpec::Kind::kChoice;
    c.field = "guided_choice";
    RETURN_IF_ERROR(Choices(e, c.field, &c.choices));
    found.push_back(std::move(c));
  }
  if (f.Get("guided_grammar", &e)) {
    ConstraintSpec c;
    c.kind = ConstraintSpec::Kind::kGrammar;
    c.field = "guided_grammar";
    RETURN_IF_ERROR(StringField(e, c.field, &c.text));
    found.push_back(std::move(c));
  }
  if (f.Get("guided_whitespace_pattern", &e)) {
    if (ws)
      return FieldError("guided_whitespace_pattern",
                        "and structured_outputs.whitespace_pattern: give one");
    std::string w;
    RETURN_IF_ERROR(StringField(e, "guided_whitespace_pattern", &w));
    ws = w;
    ws_field = "guided_whitespace_pattern";
  }

  if (found.size() > 1) {
    std::string names;
    for (size_t i = 0; i < found.size(); ++i) names += (i ? ", " : "") + found[i].field;
    return InvalidArgument("several structured-output constraints in one request (" + names +
                           "); give one");
  }
  if (ws) {
    if (found.empty() || (found[0].kind != ConstraintSpec::Kind::kJsonSchema &&
                          found[0].kind != ConstraintSpec::Kind::kJsonObject)) {
      return FieldError(ws_field,
                        "applies to JSON constraints only (json_schema, json_object, guided_json)");
    }
    found[0].whitespace = ws;
  }
  if (!found.empty()) {
    p->constraint = std::move(found[0]);
    p->grammar.reset();
  }
  return Status::Ok();
}

}  // namespace sluice::io
