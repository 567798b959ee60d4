// The values a chat template computes with, and the Python behaviour jinja2 gives them: str() and repr() for
// output, json.dumps for transformers' tojson, ==, truthiness. Chat templates only read their inputs (the sandbox
// transformers uses is immutable), so lists and maps are shared immutable; only namespace() objects change, and
// they are shared by reference as in Python.
//
// Strings are UTF-8 bytes; lengths, indexes and slices count code points, as Python's do.
// Plain value types; no locking.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace deepspeed::serving::jinja {

// An error while rendering: the message says what failed; the renderer adds the template's name and position.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A construct the renderer does not implement, met while rendering (a method of an unusual value); named as the
// parser names the constructs it refuses.
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The template's raise_exception(message).
class RaisedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
using List = std::vector<Value>;

// A dict with Python's insertion order and string keys (JSON objects and template dict literals).
struct Map {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kMap, kNamespace, kCallable };

  // Undefined: what a missing variable, key or attribute gives. `hint` is jinja2's UndefinedError message, raised
  // when the value is used for more than a test, output ("") or iteration (nothing).
  Value() : kind_(Kind::kUndefined) {}
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b) : kind_(Kind::kBool), int_(b ? 1 : 0) {}  // NOLINT(google-explicit-constructor)
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}        // NOLINT(google-explicit-constructor)
  Value(int i) : kind_(Kind::kInt), int_(i) {}            // NOLINT(google-explicit-constructor)
  Value(double d) : kind_(Kind::kFloat), float_(d) {}     // NOLINT(google-explicit-constructor)
  Value(std::string s);                                   // NOLINT(google-explicit-constructor)
  Value(const char* s) : Value(std::string(s)) {}         // NOLINT(google-explicit-constructor)
  static Value list(List items);
  // A list that prints as a Python tuple ("(k, v)"): what dict.items() and dictsort give.
  static Value tuple(List items);
  static Value map(Map entries);
  static Value make_namespace(Map entries);
  static Value callable(std::string name, std::function<Value(const CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_map() const { return kind_ == Kind::kMap; }
  // bool, int or float: Python's numbers (bool is an int there).
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(float_) : int_; }
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *string_; }
  const List& as_list() const { return *list_; }
  // A dict's or a namespace's entries.
  const Map& as_map() const { return *map_; }
  Map& namespace_entries() const { return *map_; }
  const Callable& as_callable() const { return *callable_; }
  const std::string& undefined_hint() const { return *string_; }

  bool truthy() const;
  // Python's type name, as jinja2's messages use it: "str", "int", "dict", "NoneType", ...
  std::string type_name() const;
  // Throws RenderError with jinja2's UndefinedError message when undefined; the value otherwise.
  const Value& defined_or_throw() const;

 private:
  Kind kind_;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Map> map_;  // const in use unless kind_ is kNamespace
  std::shared_ptr<const Callable> callable_;
};

// Python's ==, as jinja2 compares (1 == 1.0 == True; dicts equal whatever their order).
bool values_equal(const Value& a, const Value& b);
// Python's str() (what {{ }} and ~ print) and repr() (inside printed lists and dicts).
std::string value_str(const Value& v);
std::string value_repr(const Value& v);
// Python's repr of a float: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string float_repr(double d);

// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys): transformers' tojson.
struct JsonStyle {
  bool indent_set = false;
  std::string indent;  // one level's indentation, when indent_set
  bool separators_set = false;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
std::string value_json(const Value& v, const JsonStyle& style);

// UTF-8: the byte offset of each code point of `s`, then s.size().
std::vector<size_t> utf8_offsets(const std::string& s);
size_t utf8_length(const std::string& s);

}  // namespace deepspeed::serving::jinja
