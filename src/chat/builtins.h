// Operations, methods, filters and tests of the chat-template engine (internal; render.cc is
// the caller). Errors are plain messages; render.cc prefixes the template line.
#pragma once

#include <string>
#include <vector>

#include "chat/template.h"
#include "chat/value.h"

namespace sluice::chat {

StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
StatusOr<Value> GetItem(const Value& obj, const Value& key);
StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop, const Value& step);
StatusOr<std::vector<Value>> Iterate(const Value& v);
StatusOr<bool> Contains(const Value& container, const Value& item);
StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b,
                         const RenderOptions& opts);
StatusOr<Value> CallFilter(const std::string& name, const Value& in, CallArgs& args,
                           const RenderOptions& opts);
StatusOr<bool> CallTest(const std::string& name, const Value& v, CallArgs& args);
Status UndefinedError(const Value& v);

std::string ToUpper(const std::string& s);
std::string ToLower(const std::string& s);

}  // namespace sluice::chat
