#include "deepspeed/config/params.h"

#include <cmath>
#include <sstream>

#include "deepspeed/error.h"

namespace deepspeed::config {

ParamValue ParamValue::boolean(bool v) {
  ParamValue p;
  p.kind_ = Kind::kBool;
  p.bool_ = v;
  return p;
}

ParamValue ParamValue::number(double v) {
  ParamValue p;
  p.kind_ = Kind::kNumber;
  p.number_ = v;
  return p;
}

ParamValue ParamValue::string(std::string v) {
  ParamValue p;
  p.kind_ = Kind::kString;
  p.string_ = std::move(v);
  return p;
}

ParamValue ParamValue::number_list(std::vector<double> v) {
  ParamValue p;
  p.kind_ = Kind::kNumberList;
  p.list_ = std::move(v);
  return p;
}

ParamValue ParamValue::auto_value() {
  ParamValue p;
  p.kind_ = Kind::kAuto;
  return p;
}

const char* ParamValue::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "true or false";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kNumberList:
      return "a list of numbers";
    case Kind::kAuto:
      return "\"auto\"";
  }
  return "?";
}

std::string ParamValue::to_string() const {
  std::ostringstream os;
  os.precision(17);
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return bool_ ? "true" : "false";
    case Kind::kNumber:
      os << number_;
      return os.str();
    case Kind::kString:
      return "\"" + string_ + "\"";
    case Kind::kNumberList:
      os << "[";
      for (size_t i = 0; i < list_.size(); ++i) os << (i ? ", " : "") << list_[i];
      os << "]";
      return os.str();
    case Kind::kAuto:
      return "\"auto\"";
  }
  return "?";
}

bool ParamValue::operator==(const ParamValue& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kNull:
    case Kind::kAuto:
      return true;
    case Kind::kBool:
      return bool_ == o.bool_;
    case Kind::kNumber:
      return number_ == o.number_;
    case Kind::kString:
      return string_ == o.string_;
    case Kind::kNumberList:
      return list_ == o.list_;
  }
  return false;
}

bool Params::is_auto(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() && it->second.is_auto();
}

const ParamValue* Params::find_typed(const std::string& name, ParamValue::Kind kind) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.is_null()) return nullptr;
  if (it->second.kind() != kind) {
    throw ConfigError(path_ + "." + name + ": expected " + ParamValue::kind_name(kind) + ", got " +
                      it->second.to_string());
  }
  return &it->second;
}

double Params::get_number(const std::string& name, double fallback) const {
  const ParamValue* v = find_typed(name, ParamValue::Kind::kNumber);
  return v ? v->number_value() : fallback;
}

int64_t Params::get_int(const std::string& name, int64_t fallback) const {
  const ParamValue* v = find_typed(name, ParamValue::Kind::kNumber);
  if (!v) return fallback;
  double d = v->number_value();
  if (std::floor(d) != d || std::fabs(d) >= 9.2e18) {
    throw ConfigError(path_ + "." + name + ": expected an integer, got " + v->to_string());
  }
  return static_cast<int64_t>(d);
}

bool Params::get_bool(const std::string& name, bool fallback) const {
  const ParamValue* v = find_typed(name, ParamValue::Kind::kBool);
  return v ? v->bool_value() : fallback;
}

std::string Params::get_string(const std::string& name, const std::string& fallback) const {
  const ParamValue* v = find_typed(name, ParamValue::Kind::kString);
  return v ? v->string_value() : fallback;
}

std::vector<double> Params::get_number_list(const std::string& name,
                                            const std::vector<double>& fallback) const {
  const ParamValue* v = find_typed(name, ParamValue::Kind::kNumberList);
  return v ? v->number_list_value() : fallback;
}

}  // namespace deepspeed::config
