// Attribute and item lookup, slicing, iteration, the methods of strings and dicts, and the globals
// (jinja_builtins.h).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <set>

#include "serving/jinja_builtins.h"

namespace deepspeed::serving::jinja {

namespace {

const std::set<std::string>& methods_of_str() {
  static const std::set<std::string> names = {"startswith", "endswith", "strip", "lstrip", "rstrip",
                                              "split",      "replace",  "title", "upper",  "lower",
                                              "capitalize", "find",     "join"};
  return names;
}

const std::set<std::string>& methods_of_dict() {
  static const std::set<std::string> names = {"items", "keys", "values", "get"};
  return names;
}

bool methods_is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

std::string methods_missing(const Value& obj, const std::string& what) {
  if (obj.is_none()) return "'None' has no attribute '" + what + "'";
  return "'" + obj.type_name() + " object' has no attribute '" + what + "'";
}

std::string methods_string_arg(const CallArgs& args, size_t position, const char* keyword, const std::string& method) {
  const Value v = call_arg(args, position, keyword, Value::none());
  if (!v.is_string()) throw RenderError(method + "() argument must be str, not " + v.type_name());
  return v.as_string();
}

// Python's str.split(sep, maxsplit): on runs of whitespace when `sep` is null.
List methods_split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  List parts;
  if (sep != nullptr) {
    if (sep->empty()) throw RenderError("split(): empty separator");
    size_t start = 0;
    size_t found;
    while ((maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
           (found = s.find(*sep, start)) != std::string::npos) {
      parts.emplace_back(s.substr(start, found - start));
      start = found + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size() && methods_is_space(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(s.substr(i));  // the rest as it is, trailing whitespace included
      break;
    }
    size_t j = i;
    while (j < s.size() && !methods_is_space(s[j])) ++j;
    parts.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

// Python's str.title and str.capitalize for ASCII letters; other characters are left as they are.
std::string methods_title(const std::string& s, bool capitalize_only) {
  std::string out = s;
  bool previous_cased = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool cased = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool make_upper = capitalize_only ? i == 0 : !previous_cased;
    if (cased) out[i] = static_cast<char>(make_upper ? std::toupper(c) : std::tolower(c));
    previous_cased = cased;
  }
  return out;
}

std::string methods_case(const std::string& s, bool upper) {
  std::string out = s;
  for (char& c : out) {
    if (c >= 'a' && c <= 'z' && upper) c = static_cast<char>(c - 'a' + 'A');
    if (c >= 'A' && c <= 'Z' && !upper) c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool methods_affix(const std::string& s, const Value& affix, bool prefix, const std::string& method) {
  List options = affix.is_list() ? affix.as_list() : List{affix};
  for (const Value& o : options) {
    if (!o.is_string()) throw RenderError(method + " first arg must be str or a tuple of str, not " + o.type_name());
    const std::string& a = o.as_string();
    if (a.size() > s.size()) continue;
    if (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0) return true;
  }
  return false;
}

Value methods_call_str(const std::string& s, const std::string& name, const CallArgs& args) {
  static const Value kNone = Value::none();
  if (name == "startswith" || name == "endswith") {
    check_call_args(args, 1, "", "str." + name);
    return methods_affix(s, call_arg(args, 0, nullptr, kNone), name == "startswith", name);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_call_args(args, 1, "", "str." + name);
    const Value chars = call_arg(args, 0, nullptr, kNone);
    if (!chars.is_none() && !chars.is_string()) throw RenderError(name + " arg must be None or str");
    return python_strip(s, chars.is_string() ? &chars.as_string() : nullptr, name != "rstrip", name != "lstrip");
  }
  if (name == "split") {
    check_call_args(args, 2, "sep,maxsplit", "str.split");
    const Value sep = call_arg(args, 0, "sep", kNone);
    const Value maxsplit = call_arg(args, 1, "maxsplit", Value(-1));
    if (!sep.is_none() && !sep.is_string()) throw RenderError("must be str or None, not " + sep.type_name());
    return Value::list(methods_split(s, sep.is_string() ? &sep.as_string() : nullptr, maxsplit.as_int()));
  }
  if (name == "replace") {
    check_call_args(args, 3, "", "str.replace");
    const std::string& old_text = methods_string_arg(args, 0, nullptr, name);
    const std::string& new_text = methods_string_arg(args, 1, nullptr, name);
    const int64_t count = call_arg(args, 2, nullptr, Value(-1)).as_int();
    return Value(python_replace(s, old_text, new_text, count));
  }
  check_call_args(args, name == "find" || name == "join" ? 1 : 0, "", "str." + name);
  if (name == "title" || name == "capitalize")
    return Value(methods_title(name == "title" ? s : methods_case(s, false), name == "capitalize"));
  if (name == "upper" || name == "lower") return Value(methods_case(s, name == "upper"));
  if (name == "find") {
    const size_t at = s.find(methods_string_arg(args, 0, nullptr, name));
    return at == std::string::npos ? Value(-1) : Value(static_cast<int64_t>(utf8_length(s.substr(0, at))));
  }
  std::string out;  // join
  const List items = iterate_value(call_arg(args, 0, nullptr, kNone), "str.join");
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      throw RenderError("sequence item " + std::to_string(i) + ": expected str instance, " + items[i].type_name() +
                        " found");
    }
    out += (i ? s : "") + items[i].as_string();
  }
  return Value(out);
}

Value methods_call_dict(const Value& obj, const std::string& name, const CallArgs& args) {
  const Map& m = obj.as_map();
  if (name == "get") {
    check_call_args(args, 2, "", "dict.get");
    static const Value kNone = Value::none();
    const Value key = call_arg(args, 0, nullptr, kNone);
    const Value* found = key.is_string() ? m.find(key.as_string()) : nullptr;
    return found != nullptr ? *found : call_arg(args, 1, nullptr, kNone);
  }
  check_call_args(args, 0, "", "dict." + name);
  List out;
  for (const auto& [k, v] : m.items) {
    if (name == "items") out.push_back(Value::tuple({Value(k), v}));
    if (name == "keys") out.emplace_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::list(std::move(out));
}

// Python's slice.indices: the start, stop and step a slice of a sequence of `length` walks.
void methods_slice_bounds(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                          int64_t& from, int64_t& to) {
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? length - 1 : length;
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + length : *v;
    return std::min(std::max(x, lower), upper);
  };
  from = clamp(start, step < 0 ? upper : lower);
  to = clamp(stop, step < 0 ? lower : upper);
}

Value methods_range(const CallArgs& args) {
  check_call_args(args, 3, "", "range");
  for (const Value& a : args.args) {
    if (a.kind() != Value::Kind::kInt && a.kind() != Value::Kind::kBool) {
      throw RenderError("range(): '" + a.type_name() + "' object cannot be interpreted as an integer");
    }
  }
  if (args.args.empty()) throw RenderError("range expected at least 1 argument, got 0");
  const int64_t start = args.args.size() == 1 ? 0 : args.args[0].as_int();
  const int64_t stop = args.args.size() == 1 ? args.args[0].as_int() : args.args[1].as_int();
  const int64_t step = args.args.size() == 3 ? args.args[2].as_int() : 1;
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  // jinja2's sandbox caps ranges (MAX_RANGE) so a template cannot allocate without bound.
  const int64_t count = step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
  if (count > 100000) throw RenderError("range too big, the sandbox allows 100000 items");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value::list(std::move(out));
}

Value methods_namespace(const CallArgs& args, bool is_namespace) {
  Map entries;
  for (const Value& a : args.args) {
    if (!a.is_map())
      throw RenderError(std::string(is_namespace ? "namespace" : "dict") + "() takes mappings or keyword arguments");
    for (const auto& [k, v] : a.as_map().items) entries.set(k, v);
  }
  for (const auto& [k, v] : args.kwargs) entries.set(k, v);
  return is_namespace ? Value::make_namespace(std::move(entries)) : Value::map(std::move(entries));
}

Value methods_strftime_now(const CallArgs& args) {
  check_call_args(args, 1, "", "strftime_now");
  static const Value kNone = Value::none();
  const Value format = call_arg(args, 0, nullptr, kNone);
  if (!format.is_string()) throw RenderError("strftime_now() argument must be str, not " + format.type_name());
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256 + format.as_string().size() * 8, '\0');
  buf.resize(std::strftime(buf.data(), buf.size(), format.as_string().c_str(), &local));
  return Value(buf);
}

}  // namespace

std::string python_replace(const std::string& s, const std::string& old_text, const std::string& new_text,
                           int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::vector<size_t> offsets = utf8_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done++ < count) out += new_text;
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  size_t found;
  int64_t done = 0;
  while ((count < 0 || done < count) && (found = s.find(old_text, start)) != std::string::npos) {
    out.append(s, start, found - start);
    out += new_text;
    start = found + old_text.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  // With `chars`, strip whole code points that occur in it.
  const std::vector<size_t> offsets = utf8_offsets(s);
  auto strippable = [&](size_t k) {
    const size_t len = offsets[k + 1] - offsets[k];
    if (chars == nullptr) return len == 1 && methods_is_space(s[offsets[k]]);
    return chars->find(s.substr(offsets[k], len)) != std::string::npos;
  };
  size_t begin = 0;
  size_t end = offsets.size() - 1;
  while (left && begin < end && strippable(begin)) ++begin;
  while (right && end > begin && strippable(end - 1)) --end;
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

bool is_supported_method(const std::string& name) {
  return methods_of_str().count(name) != 0 || methods_of_dict().count(name) != 0;
}

bool is_unsupported_global(const std::string& name) { return name == "lipsum" || name == "cycler" || name == "joiner"; }

Value call_arg(const CallArgs& args, size_t position, const char* keyword, const Value& fallback) {
  if (position < args.args.size()) return args.args[position];
  if (keyword != nullptr) {
    for (const auto& [k, v] : args.kwargs) {
      if (k == keyword) return v;
    }
  }
  return fallback;
}

void check_call_args(const CallArgs& args, size_t positional, const std::string& keywords, const std::string& what) {
  if (args.args.size() > positional) {
    throw RenderError(what + "() takes at most " + std::to_string(positional) + " positional arguments (" +
                      std::to_string(args.args.size()) + " given)");
  }
  const std::string list = "," + keywords + ",";
  for (const auto& kw : args.kwargs) {
    if (list.find("," + kw.first + ",") == std::string::npos) {
      throw RenderError(what + "() got an unexpected keyword argument '" + kw.first + "'");
    }
  }
}

Value get_attribute(const Value& obj, const std::string& name) {
  obj.defined_or_throw();
  if (obj.is_map()) {
    if (methods_of_dict().count(name) != 0) {
      return Value::callable("dict." + name,
                             [obj, name](const CallArgs& a) { return methods_call_dict(obj, name, a); });
    }
    const Value* found = obj.as_map().find(name);
    return found != nullptr ? *found : Value::undefined(methods_missing(obj, name));
  }
  if (obj.kind() == Value::Kind::kNamespace) {
    const Value* found = obj.namespace_entries().find(name);
    return found != nullptr ? *found : Value::undefined(methods_missing(obj, name));
  }
  if (obj.is_string() && methods_of_str().count(name) != 0) {
    const std::string s = obj.as_string();
    return Value::callable("str." + name, [s, name](const CallArgs& a) { return methods_call_str(s, name, a); });
  }
  return Value::undefined(methods_missing(obj, name));
}

Value get_item(const Value& obj, const Value& key) {
  obj.defined_or_throw();
  const bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if ((obj.is_list() || obj.is_string()) && int_key) {
    const int64_t length =
        obj.is_list() ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(utf8_length(obj.as_string()));
    int64_t i = key.as_int();
    if (i < 0) i += length;
    if (i < 0 || i >= length)
      return Value::undefined("'" + obj.type_name() + " object' has no element " + std::to_string(key.as_int()));
    if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
    const std::vector<size_t> offsets = utf8_offsets(obj.as_string());
    return Value(obj.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  if ((obj.is_map() || obj.kind() == Value::Kind::kNamespace) && key.is_string()) {
    const Value* found = obj.as_map().find(key.as_string());
    if (found != nullptr) return *found;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + value_repr(key));
}

Value slice_value(const Value& obj, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                  const std::optional<int64_t>& step) {
  obj.defined_or_throw();
  if (!obj.is_list() && !obj.is_string()) throw RenderError("'" + obj.type_name() + "' object is not subscriptable");
  const int64_t by = step.value_or(1);
  if (by == 0) throw RenderError("slice step cannot be zero");
  std::vector<size_t> offsets;
  if (obj.is_string()) offsets = utf8_offsets(obj.as_string());
  const int64_t length =
      obj.is_list() ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(offsets.size() - 1);
  int64_t from = 0;
  int64_t to = 0;
  methods_slice_bounds(length, start, stop, by, from, to);
  List items;
  std::string text;
  for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
    if (obj.is_list()) {
      items.push_back(obj.as_list()[static_cast<size_t>(i)]);
    } else {
      text.append(obj.as_string(), offsets[i], offsets[i + 1] - offsets[i]);
    }
  }
  return obj.is_list() ? Value::list(std::move(items)) : Value(text);
}

List iterate_value(const Value& v, const char* context) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kMap: {
      List keys;
      for (const auto& [k, item] : v.as_map().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::vector<size_t> offsets = utf8_offsets(v.as_string());
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.emplace_back(v.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      return chars;
    }
    default:
      throw RenderError(std::string(context) + ": '" + v.type_name() + "' object is not iterable");
  }
}

Map make_globals() {
  Map g;
  g.set("range", Value::callable("range", methods_range));
  g.set("namespace", Value::callable("namespace", [](const CallArgs& a) { return methods_namespace(a, true); }));
  g.set("dict", Value::callable("dict", [](const CallArgs& a) { return methods_namespace(a, false); }));
  g.set("strftime_now", Value::callable("strftime_now", methods_strftime_now));
  g.set("raise_exception", Value::callable("raise_exception", [](const CallArgs& a) -> Value {
          static const Value kNone = Value::none();
          throw RaisedError(value_str(call_arg(a, 0, "message", kNone)));
        }));
  return g;
}

}  // namespace deepspeed::serving::jinja
