// What jinja2 and Python give a chat template beyond its syntax: the filters and tests it may name, attribute and
// item lookup as jinja2's sandbox does it (obj.name prefers attributes, obj[key] items; a miss is undefined), the
// methods of strings and dicts, slicing, iteration, and the globals transformers provides (raise_exception,
// strftime_now) beside jinja2's (range, namespace, dict).
//
// Only the names the is_supported_* functions accept exist; the parser refuses the others before rendering.
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "serving/jinja_value.h"

namespace deepspeed::serving::jinja {

bool is_supported_filter(const std::string& name);
bool is_supported_test(const std::string& name);
// A method name the renderer implements for some value (str.startswith, dict.items, ...).
bool is_supported_method(const std::string& name);
// jinja2 globals the renderer does not implement (lipsum, cycler, joiner): refused by name.
bool is_unsupported_global(const std::string& name);

// jinja_filters.cc
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// jinja_methods.cc
// obj.name: a dict's method of that name, else its item; a string's or list's method; undefined when missing.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: the item (negative indexes count from the end), else the attribute; undefined when missing.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings (code points).
Value slice_value(const Value& obj, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                  const std::optional<int64_t>& step);
// What `for` and the filters iterate: a list's items, a dict's keys, a string's characters, nothing for undefined.
List iterate_value(const Value& v, const char* context);
// The globals every render starts with.
Map make_globals();

// Python's str.strip/lstrip/rstrip: `chars` null strips whitespace.
std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right);
// Python's str.replace; `count` < 0 replaces every occurrence.
std::string python_replace(const std::string& s, const std::string& old_text, const std::string& new_text,
                           int64_t count);

// A filter's, method's or function's argument by position or keyword; `fallback` when absent.
Value call_arg(const CallArgs& args, size_t position, const char* keyword, const Value& fallback);
// Refuses arguments beyond `positional` and keywords not in `keywords` (comma-separated), naming `what`.
void check_call_args(const CallArgs& args, size_t positional, const std::string& keywords, const std::string& what);

}  // namespace deepspeed::serving::jinja
