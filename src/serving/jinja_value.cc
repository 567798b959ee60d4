#include "serving/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace deepspeed::serving::jinja {

const Value* Map::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Map::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(std::string s) : kind_(Kind::kString), string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::map(Map entries) {
  Value v;
  v.kind_ = Kind::kMap;
  v.map_ = std::make_shared<Map>(std::move(entries));
  return v;
}

Value Value::make_namespace(Map entries) {
  Value v = map(std::move(entries));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kMap:
      return !map_->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kMap:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

const Value& Value::defined_or_throw() const {
  if (kind_ == Kind::kUndefined) throw RenderError(string_ ? *string_ : std::string("value is undefined"));
  return *this;
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() != K::kFloat && b.kind() != K::kFloat) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kMap: {
      const Map& x = a.as_map();
      const Map& y = b.as_map();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.namespace_entries() == &b.namespace_entries();
    case K::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

std::vector<size_t> utf8_offsets(const std::string& s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    // Continuation bytes (10xxxxxx) belong to the code point before them.
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

namespace {

// Decodes the code point at s[i]; `len` gets its byte count. Invalid bytes decode as themselves, one byte each.
uint32_t value_decode_utf8(const std::string& s, size_t i, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int extra = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC0 ? 1 : 0;
  if (i + static_cast<size_t>(extra) >= s.size()) extra = 0;  // a truncated sequence: the byte alone
  uint32_t cp = extra == 0 ? b0 : (b0 & (0x3F >> extra));
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  len = static_cast<size_t>(extra) + 1;
  return cp;
}

// Python's str.isprintable for the code points chat text carries: controls, the C1 range and the invisible
// spaces and format marks are not printable (repr escapes them).
bool value_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) {
    return false;
  }
  return !(cp == 0x3000 || cp == 0xFEFF || (cp >= 0xD800 && cp <= 0xDFFF));
}

void value_append_hex(std::string& out, const char* prefix, uint32_t cp, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, static_cast<unsigned>(cp));
  out += buf;
}

std::string value_repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = value_decode_utf8(s, i, len);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!value_printable(cp)) {
      if (cp < 0x100) {
        value_append_hex(out, "\\x", cp, 2);
      } else if (cp < 0x10000) {
        value_append_hex(out, "\\u", cp, 4);
      } else {
        value_append_hex(out, "\\U", cp, 8);
      }
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += quote;
  return out;
}

std::string value_repr_items(const Value& v) {
  std::string out;
  if (v.is_list()) {
    out = v.is_tuple() ? "(" : "[";
    const List& items = v.as_list();
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + value_repr(items[i]);
    if (v.is_tuple()) return out + (items.size() == 1 ? ",)" : ")");
    return out + "]";
  }
  out = "{";
  const Map& m = v.as_map();
  for (size_t i = 0; i < m.items.size(); ++i) {
    out += (i ? ", " : "") + value_repr_string(m.items[i].first) + ": " + value_repr(m.items[i].second);
  }
  return out + "}";
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits in exponent form ("-1.2345e+02"), then laid out as Python's repr lays them out.
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  const int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    if (n <= exp + 1) return sign + digits + std::string(static_cast<size_t>(exp + 1 - n), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
  }
  std::string out = sign + digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

std::string value_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return value_repr_string(v.as_string());
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kList:
    case Value::Kind::kMap:
      return value_repr_items(v);
    default:
      return value_str(v);
  }
}

std::string value_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return float_repr(v.as_float());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kList:
    case Value::Kind::kMap:
      return value_repr_items(v);
    case Value::Kind::kNamespace:
      return "<Namespace " + value_repr_items(Value::map(v.namespace_entries())) + ">";
    case Value::Kind::kCallable:
      throw UnsupportedError("printing the function '" + v.as_callable().name + "' (its Python repr)");
  }
  return "";
}

namespace {

std::string value_json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          value_append_hex(out, "\\u", c, 4);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

void value_json_into(const Value& v, const JsonStyle& style, int level, std::string& out);

// The text between two items and after the opening bracket, as json.dumps lays it out at `level`.
std::string value_json_break(const JsonStyle& style, int level) {
  std::string s = "\n";
  for (int i = 0; i < level; ++i) s += style.indent;
  return s;
}

void value_json_container(const Value& v, const JsonStyle& style, int level, std::string& out) {
  const bool is_list = v.is_list();
  const std::string item_sep = style.separators_set ? style.item_separator : style.indent_set ? "," : ", ";
  const std::string key_sep = style.separators_set ? style.key_separator : ": ";
  std::vector<std::pair<std::string, const Value*>> entries;
  if (is_list) {
    for (const Value& item : v.as_list()) entries.emplace_back("", &item);
  } else {
    for (const auto& [k, item] : v.as_map().items) entries.emplace_back(k, &item);
    if (style.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
  }
  out += is_list ? '[' : '{';
  if (entries.empty()) {
    out += is_list ? ']' : '}';
    return;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += item_sep;
    if (style.indent_set) out += value_json_break(style, level + 1);
    if (!is_list) out += value_json_string(entries[i].first) + key_sep;
    value_json_into(*entries[i].second, style, level + 1, out);
  }
  if (style.indent_set) out += value_json_break(style, level);
  out += is_list ? ']' : '}';
}

void value_json_into(const Value& v, const JsonStyle& style, int level, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::kString:
      out += value_json_string(v.as_string());
      return;
    case Value::Kind::kList:
    case Value::Kind::kMap:
      value_json_container(v, style, level, out);
      return;
    default:
      throw RenderError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string value_json(const Value& v, const JsonStyle& style) {
  std::string out;
  value_json_into(v, style, 0, out);
  return out;
}

}  // namespace deepspeed::serving::jinja
