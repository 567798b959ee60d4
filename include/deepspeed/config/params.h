// Optimizer and scheduler `params` blocks, readable with plain C++ types.
//
// DeepSpeed passes these blocks straight to the optimizer / scheduler constructor, so their
// contents depend on the chosen type. We keep them as a sorted map from parameter name to a small
// value (null, bool, number, string, list of numbers, or HF-style "auto"), validated against the
// known parameters of the type at load time, with DeepSpeed's defaults filled in where DeepSpeed
// has one. Accessors throw ConfigError naming the JSON path when a value has the wrong kind. Plain
// value types: safe to read from many threads, not to mutate concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deepspeed::config {

class ParamValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kNumberList, kAuto };

  ParamValue() = default;  // null
  static ParamValue null_value() { return ParamValue(); }
  static ParamValue boolean(bool v);
  static ParamValue number(double v);
  static ParamValue string(std::string v);
  static ParamValue number_list(std::vector<double> v);
  static ParamValue auto_value();  // the HF integration's "auto": resolved later by initialize

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_auto() const { return kind_ == Kind::kAuto; }
  // Unchecked reads; use Params' getters for path-named errors.
  bool bool_value() const { return bool_; }
  double number_value() const { return number_; }
  const std::string& string_value() const { return string_; }
  const std::vector<double>& number_list_value() const { return list_; }

  // "a number", "a bool", ... for error messages.
  static const char* kind_name(Kind kind);
  // The value as JSON text (for error messages and debugging).
  std::string to_string() const;

  bool operator==(const ParamValue& o) const;
  bool operator!=(const ParamValue& o) const { return !(*this == o); }

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  std::string string_;
  std::vector<double> list_;
};

// The `params` block of `optimizer` or `scheduler`. `path` is its JSON path, used in errors.
class Params {
 public:
  Params() = default;
  explicit Params(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  const std::map<std::string, ParamValue>& values() const { return values_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool is_auto(const std::string& name) const;
  void set(const std::string& name, ParamValue value) { values_[name] = std::move(value); }
  void erase(const std::string& name) { values_.erase(name); }

  // Typed reads. Absent or null returns `fallback`; "auto" or another kind throws ConfigError
  // (`optimizer.params.lr: expected a number, got "auto"`): resolve auto values before reading.
  double get_number(const std::string& name, double fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  bool get_bool(const std::string& name, bool fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<double> get_number_list(const std::string& name,
                                      const std::vector<double>& fallback) const;

  bool operator==(const Params& o) const { return values_ == o.values_; }

 private:
  const ParamValue* find_typed(const std::string& name, ParamValue::Kind kind) const;

  std::string path_;
  std::map<std::string, ParamValue> values_;
};

}  // namespace deepspeed::config
