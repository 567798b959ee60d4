#include "config/json_reader.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "config/suggest.h"
#include "deepspeed/error.h"

namespace deepspeed::config {

void fail_at(const std::string& path, const std::string& message) {
  throw ConfigError(path.empty() ? message : path + ": " + message);
}

std::string describe(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join_path(const std::string& parent, const std::string& key) {
  // Keys come from the user's file: a NUL or newline in one must not cut or split the message that
  // names it (no key we accept holds either, so matching is unaffected).
  const std::string shown = ::deepspeed::detail::printable(key);
  return parent.empty() ? shown : parent + "." + shown;
}

namespace {

// "<kind> in lo..hi", "<kind> >= lo", "<kind> <= hi" or "<kind>", by which bounds are the key's own.
template <class T>
std::string bounded(const char* kind, T lo, T hi, bool has_lo, bool has_hi) {
  std::ostringstream os;
  os << kind;
  if (has_lo && has_hi) {
    os << " in " << lo << ".." << hi;
  } else if (has_lo) {
    os << " >= " << lo;
  } else if (has_hi) {
    os << " <= " << hi;
  }
  return os.str();
}

}  // namespace

std::string int_type_text(int64_t lo, int64_t hi) {
  // Bounds at the edge of int or int64 are the type's limits, not the key's: leave them out.
  return bounded("integer", lo, hi, lo > std::numeric_limits<int>::min(), hi < std::numeric_limits<int>::max());
}

std::string number_type_text(double lo, double hi) {
  return bounded("number", lo, hi, std::isfinite(lo), std::isfinite(hi));
}

namespace {

std::string int_expectation(int64_t lo, int64_t hi) { return "expected an " + int_type_text(lo, hi); }
std::string number_expectation(double lo, double hi) { return "expected a " + number_type_text(lo, hi); }

}  // namespace

int64_t ObjectReader::to_int(const Json& value, const std::string& path, int64_t lo, int64_t hi) {
  int64_t result = 0;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    result = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_at(path, int_expectation(lo, hi) + ", got " + describe(value));
    }
    result = static_cast<int64_t>(u);
  } else if (value.is_number_float()) {
    // DeepSpeed configs write sizes as 5e8; accept floats that hold an integer exactly.
    double d = value.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) >= 9.2e18) {
      fail_at(path, int_expectation(lo, hi) + ", got " + describe(value));
    }
    result = static_cast<int64_t>(d);
  } else {
    fail_at(path, int_expectation(lo, hi) + ", got " + describe(value));
  }
  if (result < lo || result > hi)
    fail_at(path, int_expectation(lo, hi) + ", got " + describe(value));
  return result;
}

double ObjectReader::to_number(const Json& value, const std::string& path, double lo, double hi) {
  if (!value.is_number()) fail_at(path, number_expectation(lo, hi) + ", got " + describe(value));
  double d = value.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    fail_at(path, number_expectation(lo, hi) + ", got " + describe(value));
  }
  return d;
}

ObjectReader::ObjectReader(const Json& node, std::string path, std::set<std::string>* autos)
    : node_(node), path_(std::move(path)), autos_(autos) {
  if (!node_.is_object()) {
    fail_at(path_.empty() ? "config" : path_, "expected an object, got " + describe(node_));
  }
}

const Json* ObjectReader::find(const std::string& key) {
  known_.insert(key);
  auto it = node_.find(key);
  return it == node_.end() ? nullptr : &*it;
}

bool ObjectReader::take_auto(const std::string& key, const Json& value, AutoPolicy policy) {
  if (policy != AutoPolicy::kAllowAuto || !value.is_string() ||
      value.get<std::string>() != "auto") {
    return false;
  }
  if (autos_) autos_->insert(path_of(key));
  return true;
}

bool ObjectReader::read_bool(const std::string& key, bool* out, AutoPolicy policy) {
  const Json* v = find(key);
  if (!v || take_auto(key, *v, policy)) return false;
  if (v->is_string() && string_booleans_) {
    // DeepSpeed's pydantic models take the strings pydantic's lax mode takes ("true", "False", "1", "off", ...).
    std::string text = v->get<std::string>();
    for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* yes : {"true", "1", "yes", "y", "on", "t"})
      if (text == yes) return *out = true, true;
    for (const char* no : {"false", "0", "no", "n", "off", "f"})
      if (text == no) return *out = false, true;
  }
  if (!v->is_boolean()) fail_at(path_of(key), "expected true or false, got " + describe(*v));
  *out = v->get<bool>();
  return true;
}

bool ObjectReader::read_int(const std::string& key, int64_t* out, int64_t lo, int64_t hi,
                            AutoPolicy policy) {
  const Json* v = find(key);
  if (!v || take_auto(key, *v, policy)) return false;
  *out = to_int(*v, path_of(key), lo, hi);
  return true;
}

bool ObjectReader::read_int(const std::string& key, int* out, int lo, int hi, AutoPolicy policy) {
  int64_t wide = 0;
  if (!read_int(key, &wide, lo, hi, policy)) return false;
  *out = static_cast<int>(wide);
  return true;
}

bool ObjectReader::read_number(const std::string& key, double* out, double lo, double hi,
                               AutoPolicy policy) {
  const Json* v = find(key);
  if (!v || take_auto(key, *v, policy)) return false;
  *out = to_number(*v, path_of(key), lo, hi);
  return true;
}

bool ObjectReader::read_string(const std::string& key, std::string* out) {
  const Json* v = find(key);
  if (!v) return false;
  if (!v->is_string()) fail_at(path_of(key), "expected a string, got " + describe(*v));
  *out = v->get<std::string>();
  return true;
}

bool ObjectReader::read_optional_string(const std::string& key, std::optional<std::string>* out) {
  const Json* v = find(key);
  if (!v) return false;
  if (v->is_null()) {
    out->reset();
    return true;
  }
  if (!v->is_string()) fail_at(path_of(key), "expected a string or null, got " + describe(*v));
  *out = v->get<std::string>();
  return true;
}

bool ObjectReader::read_optional_int(const std::string& key, std::optional<int64_t>* out,
                                     int64_t lo, int64_t hi) {
  const Json* v = find(key);
  if (!v) return false;
  if (v->is_null()) {
    out->reset();
    return true;
  }
  *out = to_int(*v, path_of(key), lo, hi);
  return true;
}

bool ObjectReader::read_optional_int(const std::string& key, std::optional<int>* out, int lo,
                                     int hi) {
  std::optional<int64_t> wide;
  if (!read_optional_int(key, &wide, lo, hi)) return false;
  if (wide) {
    *out = static_cast<int>(*wide);
  } else {
    out->reset();
  }
  return true;
}

bool ObjectReader::read_string_list(const std::string& key, std::vector<std::string>* out) {
  const Json* v = find(key);
  if (!v) return false;
  if (!v->is_array()) fail_at(path_of(key), "expected a list of strings, got " + describe(*v));
  std::vector<std::string> items;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& item = (*v)[i];
    if (!item.is_string()) {
      fail_at(path_of(key) + "[" + std::to_string(i) + "]",
              "expected a string, got " + describe(item));
    }
    items.push_back(item.get<std::string>());
  }
  *out = std::move(items);
  return true;
}

bool ObjectReader::read_choice(const std::string& key, std::string* out,
                               const std::vector<std::string>& choices, bool case_insensitive) {
  const Json* v = find(key);
  if (!v) return false;
  const std::string allowed = "expected one of " + join(choices, ", ");
  if (!v->is_string()) fail_at(path_of(key), allowed + ", got " + describe(*v));
  const std::string given = v->get<std::string>();
  for (const std::string& choice : choices) {
    if (given == choice || (case_insensitive && to_lower(given) == to_lower(choice))) {
      *out = choice;
      return true;
    }
  }
  fail_at(path_of(key), allowed + ", got " + describe(*v));
}

std::string ObjectReader::pick_alias(const std::string& name, const std::string& alias) {
  const bool has_name = find(name) != nullptr;
  const bool has_alias = find(alias) != nullptr;
  if (has_name && has_alias) {
    fail_at(path_of(alias), "given together with its alias '" + name + "'; keep one");
  }
  return has_alias ? alias : name;
}

namespace {

thread_local std::vector<std::string>* warning_sink = nullptr;

}  // namespace

CollectWarnings::CollectWarnings(std::vector<std::string>* warnings) : previous_(warning_sink) {
  warning_sink = warnings;
}
CollectWarnings::~CollectWarnings() { warning_sink = previous_; }

void warn(const std::string& line) {
  if (warning_sink != nullptr) warning_sink->push_back(line);
}

std::vector<std::string> ObjectReader::unknown_keys(std::vector<std::string>* valid) const {
  valid->assign(known_.begin(), known_.end());
  std::vector<std::string> unknown;
  for (auto it = node_.begin(); it != node_.end(); ++it)
    if (!known_.count(it.key())) unknown.push_back(it.key());
  return unknown;
}

void ObjectReader::finish() const {
  std::vector<std::string> valid;
  const std::vector<std::string> unknown = unknown_keys(&valid);
  if (unknown.empty()) return;
  const std::string suggestion = did_you_mean(unknown.front(), valid);
  if (!suggestion.empty()) fail_at(path_of(unknown.front()), "unknown key (did you mean '" + suggestion + "'?)");
  fail_at(path_of(unknown.front()), "unknown key; valid keys here: " + join(valid, ", "));
}

void ObjectReader::finish_ignoring_unknown() const {
  if (warning_sink == nullptr) return;
  std::vector<std::string> valid;
  for (const std::string& key : unknown_keys(&valid)) {
    const std::string suggestion = did_you_mean(key, valid);
    warning_sink->push_back(path_of(key) + ": unknown key, ignored as DeepSpeed ignores it" +
                            (suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)"));
  }
}

}  // namespace deepspeed::config
