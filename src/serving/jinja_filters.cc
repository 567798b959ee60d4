// jinja2's filters and tests that chat templates use, with transformers' tojson (jinja_builtins.h).
#include <algorithm>
#include <cmath>
#include <set>

#include "serving/jinja_builtins.h"
#include "serving/jinja_operators.h"

namespace deepspeed::serving::jinja {

namespace {

// call_arg's position for an argument that may only be given by keyword.
constexpr size_t kKeywordOnly = static_cast<size_t>(-1);

const std::set<std::string>& filters_supported() {
  static const std::set<std::string> names = {
      "trim", "length", "count",   "upper", "lower",   "title",      "capitalize", "tojson", "items",   "first",
      "last", "join",   "default", "d",     "replace", "selectattr", "rejectattr", "select", "reject",  "map",
      "list", "string", "int",     "float", "abs",     "reverse",    "safe",       "sort",   "dictsort"};
  return names;
}

const std::set<std::string>& tests_supported() {
  static const std::set<std::string> names = {
      "defined", "undefined", "none",    "string",      "number",   "integer",  "float",       "boolean",
      "true",    "false",     "mapping", "iterable",    "sequence", "callable", "equalto",     "eq",
      "ne",      "lt",        "le",      "gt",          "ge",       "lessthan", "greaterthan", "in",
      "sameas",  "odd",       "even",    "divisibleby", "lower",    "upper"};
  return names;
}

std::string filters_text(const Value& v) { return value_str(v); }

Value filters_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value(0);
    case Value::Kind::kString:
      return Value(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::kList:
      return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::kMap:
    case Value::Kind::kNamespace:
      return Value(static_cast<int64_t>(v.as_map().items.size()));
    default:
      throw RenderError("object of type '" + v.type_name() + "' has no len()");
  }
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filters_tojson(const Value& v, const CallArgs& args) {
  check_call_args(args, 4, "ensure_ascii,indent,separators,sort_keys", "tojson");
  if (call_arg(args, 0, "ensure_ascii", Value(false)).truthy()) {
    throw UnsupportedError("tojson(ensure_ascii=True)");
  }
  JsonStyle style;
  const Value indent = call_arg(args, 1, "indent", Value::none());
  if (indent.kind() == Value::Kind::kInt) {
    style.indent_set = true;
    style.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  } else if (indent.is_string()) {
    style.indent_set = true;
    style.indent = indent.as_string();
  } else if (!indent.is_none()) {
    throw RenderError("tojson: indent must be an int or a string, not " + indent.type_name());
  }
  const Value separators = call_arg(args, 2, "separators", Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().size() != 2 || !separators.as_list()[0].is_string() ||
        !separators.as_list()[1].is_string()) {
      throw RenderError("tojson: separators must be a pair of strings");
    }
    style.separators_set = true;
    style.item_separator = separators.as_list()[0].as_string();
    style.key_separator = separators.as_list()[1].as_string();
  }
  style.sort_keys = call_arg(args, 3, "sort_keys", Value(false)).truthy();
  return Value(value_json(v, style));
}

// jinja2's make_attrgetter: "a.b" walks items (obj[key] lookup); a number picks a list element.
Value filters_attribute(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// select / reject / selectattr / rejectattr: args are [attribute,] test name, test arguments...
Value filters_select(const std::string& name, const Value& input, const CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "select" || name == "selectattr";
  if (!args.kwargs.empty()) throw RenderError(name + "() takes no keyword arguments");
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.args.empty()) throw RenderError(name + "() needs an attribute name");
    attribute = args.args[next++];
  }
  std::string test;
  if (next < args.args.size()) {
    if (!args.args[next].is_string()) throw RenderError(name + "(): the test's name must be a string");
    test = args.args[next++].as_string();
    if (!is_supported_test(test)) throw UnsupportedError("test '" + test + "' in " + name + "()");
  }
  CallArgs test_args;
  test_args.args.assign(args.args.begin() + static_cast<std::ptrdiff_t>(next), args.args.end());
  List out;
  for (const Value& item : iterate_value(input, name.c_str())) {
    const Value subject = by_attribute ? filters_attribute(item, attribute) : item;
    const bool passes = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filters_map(const Value& input, const CallArgs& args) {
  List out;
  const List items = iterate_value(input, "map");
  if (args.args.empty()) {
    check_call_args(args, 0, "attribute,default", "map");
    const Value attribute = call_arg(args, kKeywordOnly, "attribute", Value::none());
    const Value fallback = call_arg(args, kKeywordOnly, "default", Value());
    for (const Value& item : items) {
      Value v = filters_attribute(item, attribute);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (!args.args[0].is_string() || !is_supported_filter(args.args[0].as_string())) {
    throw UnsupportedError("filter " + value_repr(args.args[0]) + " in map()");
  }
  CallArgs rest = args;
  rest.args.erase(rest.args.begin());
  for (const Value& item : items) out.push_back(apply_filter(args.args[0].as_string(), item, rest));
  return Value::list(std::move(out));
}

Value filters_reverse(const Value& input) {
  if (input.is_string()) return slice_value(input, std::nullopt, std::nullopt, -1);
  List items = iterate_value(input, "reverse");
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filters_number(const std::string& name, const Value& input, const CallArgs& args) {
  check_call_args(args, 1, "default", name);
  const Value fallback = call_arg(args, 0, "default", name == "int" ? Value(0) : Value(0.0));
  if (input.is_number()) return name == "int" ? Value(input.as_int()) : Value(input.as_float());
  if (input.is_string()) {
    try {
      size_t used = 0;
      const std::string s = python_strip(input.as_string(), nullptr, true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return name == "int" ? Value(static_cast<int64_t>(d)) : Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value filters_edge(const std::string& name, const Value& input) {
  if (input.is_string() || input.is_list()) {
    const Value n = filters_length(input);
    if (n.as_int() == 0) return Value::undefined("No " + name + " item, sequence was empty.");
    return get_item(input, Value(name == "first" ? int64_t{0} : int64_t{-1}));
  }
  const List items = iterate_value(input, name.c_str());
  if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
  return name == "first" ? items.front() : items.back();
}

// jinja2's title filter (not str.title): each word's first character upper, the rest lower, words being split at
// whitespace, '-', '(', '{', '[' and '<'. ASCII letters only.
std::string filters_title(const std::string& s) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const bool split = c == ' ' || (c >= '\t' && c <= '\r') || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (split) {
      word_start = true;
      continue;
    }
    if (word_start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!word_start && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    word_start = false;
  }
  return out;
}

// jinja2's ignore_case: strings compare lowered unless case_sensitive.
Value filters_sort_key(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return get_attribute(v, "lower").as_callable().fn(CallArgs{});
}

// sort(reverse, case_sensitive, attribute) and dictsort(case_sensitive, by, reverse): Python's stable sorted().
Value filters_sort(const std::string& name, const Value& input, const CallArgs& args) {
  const bool dict = name == "dictsort";
  check_call_args(args, 3, dict ? "case_sensitive,by,reverse" : "reverse,case_sensitive,attribute", name);
  const bool reverse = call_arg(args, dict ? 2 : 0, "reverse", Value(false)).truthy();
  const bool case_sensitive = call_arg(args, dict ? 0 : 1, "case_sensitive", Value(false)).truthy();
  const Value by = dict ? call_arg(args, 1, "by", Value("key")) : call_arg(args, 2, "attribute", Value::none());
  List items;
  if (dict) {
    if (!input.is_map()) throw RenderError("dictsort: can only sort a mapping, not " + input.type_name());
    items = get_attribute(input, "items").as_callable().fn(CallArgs{}).as_list();
    if (!(by.is_string() && (by.as_string() == "key" || by.as_string() == "value"))) {
      throw RenderError("dictsort: you can only sort by either \"key\" or \"value\"");
    }
  } else {
    items = iterate_value(input, "sort");
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = dict           ? item.as_list()[by.as_string() == "key" ? 0 : 1]
                : by.is_none() ? item
                               : filters_attribute(item, by);
    keys.push_back(filters_sort_key(key, case_sensitive));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? compare_values("<", keys[b], keys[a]) : compare_values("<", keys[a], keys[b]);
  });
  List out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::list(std::move(out));
}

}  // namespace

bool is_supported_filter(const std::string& name) { return filters_supported().count(name) != 0; }
bool is_supported_test(const std::string& name) { return tests_supported().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  if (name == "default" || name == "d") {
    check_call_args(args, 2, "default_value,boolean", "default");
    const Value fallback = call_arg(args, 0, "default_value", Value(""));
    const bool boolean = call_arg(args, 1, "boolean", Value(false)).truthy();
    return input.is_undefined() || (boolean && !input.truthy()) ? fallback : input;
  }
  if (name == "tojson") return filters_tojson(input, args);
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    return filters_select(name, input, args);
  }
  if (name == "map") return filters_map(input, args);
  if (name == "sort" || name == "dictsort") return filters_sort(name, input, args);
  if (name == "join") {
    check_call_args(args, 2, "d,attribute", "join");
    const Value separator = call_arg(args, 0, "d", Value(""));
    const Value attribute = call_arg(args, 1, "attribute", Value::none());
    std::string out;
    const List items = iterate_value(input, "join");
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? filters_text(separator) : "") +
             filters_text(attribute.is_none() ? items[i] : filters_attribute(items[i], attribute));
    }
    return Value(out);
  }
  if (name == "replace") {
    check_call_args(args, 3, "old,new,count", "replace");
    const Value count = call_arg(args, 2, "count", Value::none());
    return Value(python_replace(filters_text(input), filters_text(call_arg(args, 0, "old", Value(""))),
                                filters_text(call_arg(args, 1, "new", Value(""))),
                                count.is_none() ? -1 : count.as_int()));
  }
  if (name == "trim") {
    check_call_args(args, 1, "chars", "trim");
    const Value chars = call_arg(args, 0, "chars", Value::none());
    return Value(python_strip(filters_text(input), chars.is_string() ? &chars.as_string() : nullptr, true, true));
  }
  if (name == "int" || name == "float") return filters_number(name, input, args);
  check_call_args(args, 0, "", name);
  if (name == "length" || name == "count") return filters_length(input);
  if (name == "items") {
    if (input.is_undefined()) return Value::list({});
    if (!input.is_map()) throw RenderError("Can only get item pairs from a mapping.");
    return get_attribute(input, "items").as_callable().fn(CallArgs{});  // (key, value) tuples
  }
  if (name == "first" || name == "last") return filters_edge(name, input);
  if (name == "list") return Value::list(iterate_value(input, "list"));
  if (name == "string") return Value(filters_text(input));
  if (name == "safe") return input;
  if (name == "abs")
    return input.kind() == Value::Kind::kFloat ? Value(std::fabs(input.as_float()))
                                               : Value(static_cast<int64_t>(std::llabs(input.as_int())));
  if (name == "reverse") return filters_reverse(input);
  if (name == "title") return Value(filters_title(filters_text(input)));
  // upper, lower, capitalize: the string methods of the same names on the value's text.
  return get_attribute(Value(filters_text(input)), name).as_callable().fn(CallArgs{});
}

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  const Value arg = call_arg(args, 0, nullptr, Value());
  const Value::Kind k = input.kind();
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "number") return input.is_number();
  if (name == "integer") return k == Value::Kind::kInt;
  if (name == "float") return k == Value::Kind::kFloat;
  if (name == "boolean") return k == Value::Kind::kBool;
  if (name == "true" || name == "false") return k == Value::Kind::kBool && input.as_bool() == (name == "true");
  if (name == "mapping") return input.is_map();
  // Python's iter() succeeds on strings, lists, dicts and jinja2's Undefined.
  if (name == "iterable") return input.is_string() || input.is_list() || input.is_map() || input.is_undefined();
  if (name == "sequence") return input.is_string() || input.is_list() || input.is_map();
  if (name == "callable") return k == Value::Kind::kCallable;
  if (name == "equalto" || name == "eq") return values_equal(input, arg);
  if (name == "ne") return !values_equal(input, arg);
  if (name == "lt" || name == "lessthan") return compare_values("<", input, arg);
  if (name == "le") return compare_values("<=", input, arg);
  if (name == "gt" || name == "greaterthan") return compare_values(">", input, arg);
  if (name == "ge") return compare_values(">=", input, arg);
  if (name == "in") return compare_values("in", input, arg);
  if (name == "sameas") {
    if (input.kind() != arg.kind()) return false;
    return input.is_none() || input.is_undefined() || (k == Value::Kind::kBool && input.as_bool() == arg.as_bool()) ||
           ((k == Value::Kind::kNamespace || k == Value::Kind::kCallable) && values_equal(input, arg));
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (k != Value::Kind::kInt && k != Value::Kind::kBool) throw RenderError("test '" + name + "' needs an integer");
    const int64_t by = name == "divisibleby" ? arg.as_int() : 2;
    if (by == 0) throw RenderError("integer division or modulo by zero");
    const int64_t rest = ((input.as_int() % by) + by) % by;
    return name == "odd" ? rest == 1 : rest == 0;
  }
  // lower, upper: Python's str.islower / isupper, which need a cased character.
  const std::string text = filters_text(input);
  const bool cased =
      std::any_of(text.begin(), text.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
  return cased && get_attribute(Value(text), name).as_callable().fn(CallArgs{}).as_string() == text;
}

}  // namespace deepspeed::serving::jinja
