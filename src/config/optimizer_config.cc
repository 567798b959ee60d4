// optimizer and scheduler: type lookup, per-type parameter checks and defaults, dump.
//
// Parameter names and defaults follow the constructors DeepSpeed hands the block to (FusedAdam /
// DeepSpeedCPUAdam, FusedLamb, FusedLion, the 1-bit optimizers, torch.optim, lr_schedules.py).
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "config/sections.h"
#include "config/suggest.h"

namespace deepspeed::config {

namespace {

enum class Expect { kNumber, kInt, kBool, kString, kNumberList };

struct ParamSpec {
  std::string name;
  Expect expect;
  bool has_default = false;
  ParamValue fallback;
  std::vector<std::string> choices;  // allowed strings, when restricted
  double lo = -INFINITY;             // numbers (and list items): the allowed range, inclusive
  double hi = INFINITY;
  bool hi_open = false;  // hi itself is not allowed
};

// The range torch.optim's constructors check (`Invalid learning rate: -0.001`); DeepSpeed's fused
// optimizers would otherwise step uphill without a word.
ParamSpec non_negative(ParamSpec p) {
  p.lo = 0.0;
  return p;
}

struct TypeSpec {
  std::string canonical;
  std::vector<ParamSpec> params;
  std::vector<std::string> required;
};

ParamSpec make_spec(const std::string& name, Expect expect) {
  ParamSpec p;
  p.name = name;
  p.expect = expect;
  return p;
}
ParamSpec with_default(const std::string& name, Expect expect, ParamValue fallback) {
  ParamSpec p = make_spec(name, expect);
  p.has_default = true;
  p.fallback = std::move(fallback);
  return p;
}

ParamSpec num(const std::string& name) { return make_spec(name, Expect::kNumber); }
ParamSpec num(const std::string& name, double d) {
  return with_default(name, Expect::kNumber, ParamValue::number(d));
}
ParamSpec integer(const std::string& name) { return make_spec(name, Expect::kInt); }
ParamSpec integer(const std::string& name, double d) {
  return with_default(name, Expect::kInt, ParamValue::number(d));
}
ParamSpec integer_or_null(const std::string& name) {
  return with_default(name, Expect::kInt, ParamValue::null_value());
}
ParamSpec flag(const std::string& name) { return make_spec(name, Expect::kBool); }
ParamSpec flag(const std::string& name, bool b) {
  return with_default(name, Expect::kBool, ParamValue::boolean(b));
}
ParamSpec text(const std::string& name) { return make_spec(name, Expect::kString); }
ParamSpec betas(double b1, double b2) {
  ParamSpec p = with_default("betas", Expect::kNumberList, ParamValue::number_list({b1, b2}));
  p.lo = 0.0;  // torch: 0 <= beta < 1
  p.hi = 1.0;
  p.hi_open = true;
  return p;
}
ParamSpec warmup_type() {
  ParamSpec p = with_default("warmup_type", Expect::kString, ParamValue::string("log"));
  p.choices = {"log", "linear"};
  return p;
}

// DeepSpeed's Muon: one `lr` for both halves unless muon_lr / adam_lr say otherwise; `momentum` for the matrices,
// `betas` and `eps` for the auxiliary Adam (MuonWithAuxAdam's defaults: 0.02 and 3e-4 when no lr is given).
std::vector<ParamSpec> muon_params() {
  ParamSpec momentum = num("momentum", 0.95);
  momentum.lo = 0.0;
  momentum.hi = 1.0;
  momentum.hi_open = true;
  ParamSpec ns_method = with_default("ns_method", Expect::kString, ParamValue::string("gram"));
  ns_method.choices = {"gram", "standard"};
  ParamSpec ns_steps = integer("ns_steps", 5);
  ns_steps.lo = 0.0;
  return {non_negative(num("lr")), non_negative(num("muon_lr")), non_negative(num("adam_lr")), momentum,
          betas(0.9, 0.95), non_negative(num("eps", 1e-10)), non_negative(num("weight_decay", 0.0)), ns_method,
          ns_steps, flag("adam_w_mode", true), flag("per_head_muon", false), num("max_grad_norm")};
}

std::vector<ParamSpec> concat(std::vector<ParamSpec> a, const std::vector<ParamSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// torch.optim keyword arguments DeepSpeed passes through untouched.
std::vector<ParamSpec> torch_flags() {
  return {flag("foreach"), flag("maximize"), flag("capturable"), flag("differentiable"),
          flag("fused")};
}

std::vector<ParamSpec> adam_params() {
  return concat({non_negative(num("lr", 1e-3)), betas(0.9, 0.999), non_negative(num("eps", 1e-8)),
                 non_negative(num("weight_decay", 0.0)), flag("bias_correction", true),
                 flag("amsgrad", false), flag("adam_w_mode", true), flag("torch_adam", false),
                 flag("fp32_optimizer_states"), flag("set_grad_none"), num("max_grad_norm")},
                torch_flags());
}

std::vector<ParamSpec> onebit_common() {
  return {non_negative(num("lr", 1e-3)),
          flag("bias_correction", true),
          betas(0.9, 0.999),
          non_negative(num("eps", 1e-8)),
          flag("eps_inside_sqrt", false),
          non_negative(num("weight_decay", 0.0)),
          num("max_grad_norm", 0.0),
          flag("amsgrad", false),
          flag("cuda_aware", false),
          text("comm_backend_name")};
}

std::vector<ParamSpec> sgd_params() {
  return concat(
      {non_negative(num("lr", 1e-3)), non_negative(num("momentum", 0.0)), num("dampening", 0.0),
       non_negative(num("weight_decay", 0.0)), flag("nesterov", false)},
      torch_flags());
}

const std::vector<TypeSpec>& optimizer_specs() {
  static const std::vector<TypeSpec> kSpecs = {
      {"adam", adam_params(), {}},
      {"adamw", adam_params(), {}},
      {"lamb",
       {non_negative(num("lr", 1e-3)), flag("bias_correction", true), betas(0.9, 0.999),
        non_negative(num("eps", 1e-8)), flag("eps_inside_sqrt", false),
        non_negative(num("weight_decay", 0.0)), num("max_grad_norm", 0.0), num("max_coeff", 10.0),
        num("min_coeff", 0.01), flag("amsgrad", false)},
       {}},
      {"onebitadam", concat(onebit_common(), {integer("freeze_step", 100000)}), {}},
      {"zerooneadam",
       concat(onebit_common(),
              {integer("var_freeze_step", 100000), integer("var_update_scaler", 16),
               integer("local_step_scaler", 32678), integer("local_step_clipper", 16)}),
       {}},
      {"onebitlamb",
       concat(onebit_common(),
              {integer("freeze_step", 100000), num("max_coeff", 10.0), num("min_coeff", 0.01),
               num("coeff_beta", 0.9), num("factor_max", 4.0), num("factor_min", 0.5),
               num("factor_threshold", 0.1)}),
       {}},
      {"muon", muon_params(), {}},
      {"lion",
       {non_negative(num("lr", 1e-3)), betas(0.9, 0.99), non_negative(num("weight_decay", 0.0)),
        flag("set_grad_none"), flag("fp32_optimizer_states")},
       {}},
      {"adagrad",
       concat({non_negative(num("lr", 1e-2)), non_negative(num("eps", 1e-10)),
               non_negative(num("weight_decay", 0.0)), num("lr_decay"),
               num("initial_accumulator_value"), flag("amsgrad"), flag("fp32_optimizer_states")},
              torch_flags()),
       {}},
      {"muadam", adam_params(), {}},
      {"muadamw", adam_params(), {}},
      {"musgd", sgd_params(), {}},
      {"SGD", sgd_params(), {}},
      {"RMSprop",
       concat({non_negative(num("lr", 1e-2)), num("alpha", 0.99), non_negative(num("eps", 1e-8)),
               non_negative(num("weight_decay", 0.0)), non_negative(num("momentum", 0.0)),
               flag("centered", false)},
              torch_flags()),
       {}},
  };
  return kSpecs;
}

std::vector<ParamSpec> warmup_lr_params() {
  return {num("warmup_min_lr", 0.0), num("warmup_max_lr", 0.001), integer("warmup_num_steps", 1000),
          warmup_type(), integer("last_batch_iteration", -1)};
}

const std::vector<TypeSpec>& scheduler_specs() {
  static const std::vector<TypeSpec> kSpecs = {
      {"LRRangeTest",
       {num("lr_range_test_min_lr", 1e-3), integer("lr_range_test_step_size", 2000),
        num("lr_range_test_step_rate", 1.0), flag("lr_range_test_staircase", false),
        integer("last_batch_iteration", -1)},
       {}},
      {"OneCycle",
       {num("cycle_min_lr"), num("cycle_max_lr"), num("decay_lr_rate", 0.0),
        integer("cycle_first_step_size", 2000), integer_or_null("cycle_second_step_size"),
        integer("cycle_first_stair_count", 0), integer_or_null("cycle_second_stair_count"),
        integer("decay_step_size", 0), flag("cycle_momentum", true), num("cycle_min_mom", 0.8),
        num("cycle_max_mom", 0.9), num("decay_mom_rate", 0.0), integer("last_batch_iteration", -1)},
       {"cycle_min_lr", "cycle_max_lr"}},
      {"WarmupLR", warmup_lr_params(), {}},
      {"WarmupDecayLR",
       concat(warmup_lr_params(), {integer("total_num_steps")}),
       {"total_num_steps"}},
      {"WarmupCosineLR",
       {integer("total_num_steps"), num("warmup_min_ratio", 0.0), integer("warmup_num_steps", 1000),
        num("cos_min_ratio", 0.0001), warmup_type(), integer("last_batch_iteration", -1)},
       {"total_num_steps"}},
  };
  return kSpecs;
}

std::vector<std::string> canonical_names(const std::vector<TypeSpec>& specs) {
  std::vector<std::string> names;
  for (const TypeSpec& s : specs) names.push_back(s.canonical);
  return names;
}

const TypeSpec& find_type(const std::vector<TypeSpec>& specs, const ObjectReader& r,
                          const Json* type, const std::string& what) {
  const std::string path = r.path_of("type");
  const std::vector<std::string> names = canonical_names(specs);
  if (!type) fail_at(path, "required; one of " + join(names));
  if (!type->is_string())
    fail_at(path, "expected one of " + join(names) + ", got " + describe(*type));
  const std::string given = type->get<std::string>();
  for (const TypeSpec& s : specs) {
    if (to_lower(s.canonical) == to_lower(given)) return s;
  }
  std::string suggestion = did_you_mean(given, names);
  fail_at(path, "unknown " + what + " '" + given + "'" +
                    (suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)") +
                    "; known: " + join(names));
}

// A number in the spec's range; the message names the range the way the spec bounds it.
double to_ranged_number(const Json& v, const ParamSpec& spec, const std::string& path) {
  if (!spec.hi_open) return ObjectReader::to_number(v, path, spec.lo, spec.hi);
  const double d =
      v.is_number() ? v.get<double>() : ObjectReader::to_number(v, path, spec.lo, spec.hi);
  if (!std::isfinite(d) || d < spec.lo || d >= spec.hi) {
    std::ostringstream os;
    os << "expected a number in [" << spec.lo << ", " << spec.hi << "), got " << describe(v);
    fail_at(path, os.str());
  }
  return d;
}

ParamValue to_param_value(const Json& v, const ParamSpec& spec, const std::string& path) {
  if (v.is_string() && v.get<std::string>() == "auto") return ParamValue::auto_value();
  if (v.is_null()) return ParamValue::null_value();
  switch (spec.expect) {
    case Expect::kNumber:
      return ParamValue::number(to_ranged_number(v, spec, path));
    case Expect::kInt:
      return ParamValue::number(static_cast<double>(ObjectReader::to_int(
          v, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())));
    case Expect::kBool:
      if (!v.is_boolean()) fail_at(path, "expected true or false, got " + describe(v));
      return ParamValue::boolean(v.get<bool>());
    case Expect::kString: {
      if (!v.is_string()) fail_at(path, "expected a string, got " + describe(v));
      const std::string s = v.get<std::string>();
      if (!spec.choices.empty()) {
        bool ok = false;
        for (const std::string& c : spec.choices) ok = ok || c == s;
        if (!ok) fail_at(path, "expected one of " + join(spec.choices) + ", got " + describe(v));
      }
      return ParamValue::string(s);
    }
    case Expect::kNumberList: {
      if (!v.is_array()) fail_at(path, "expected a list of numbers, got " + describe(v));
      std::vector<double> items;
      for (size_t i = 0; i < v.size(); ++i) {
        items.push_back(to_ranged_number(v[i], spec, path + "[" + std::to_string(i) + "]"));
      }
      return ParamValue::number_list(std::move(items));
    }
  }
  return ParamValue::null_value();
}

// Validates `node` (the params object, may be null) against `spec` and fills defaults.
Params parse_params(const Json* node, const TypeSpec& spec, const std::string& path,
                    const std::string& what) {
  Params params(path);
  std::vector<std::string> names;
  for (const ParamSpec& p : spec.params) names.push_back(p.name);
  if (node && !node->is_null()) {
    if (!node->is_object()) fail_at(path, "expected an object, got " + describe(*node));
    for (auto it = node->begin(); it != node->end(); ++it) {
      const ParamSpec* found = nullptr;
      for (const ParamSpec& p : spec.params) {
        if (p.name == it.key()) found = &p;
      }
      const std::string param_path = join_path(path, it.key());
      if (!found) {
        std::string suggestion = did_you_mean(it.key(), names);
        fail_at(param_path, "unknown parameter for " + what + " '" + spec.canonical + "'" +
                                (suggestion.empty() ? "; known: " + join(names)
                                                    : " (did you mean '" + suggestion + "'?)"));
      }
      params.set(it.key(), to_param_value(it.value(), *found, param_path));
    }
  }
  for (const std::string& name : spec.required) {
    if (!params.has(name) || params.values().at(name).is_null()) {
      fail_at(join_path(path, name), "required by " + what + " '" + spec.canonical + "'");
    }
  }
  for (const ParamSpec& p : spec.params) {
    if (p.has_default && !params.has(p.name)) params.set(p.name, p.fallback);
  }
  return params;
}

OrderedJson dump_params(const Params& params) {
  OrderedJson j = OrderedJson::object();
  for (const auto& [name, v] : params.values()) {
    switch (v.kind()) {
      case ParamValue::Kind::kNull:
        j[name] = nullptr;
        break;
      case ParamValue::Kind::kAuto:
        j[name] = "auto";
        break;
      case ParamValue::Kind::kBool:
        j[name] = v.bool_value();
        break;
      case ParamValue::Kind::kNumber: {
        double d = v.number_value();
        // Step counts read better as integers; the value is the same either way.
        if (std::floor(d) == d && std::fabs(d) < 9e15) {
          j[name] = static_cast<int64_t>(d);
        } else {
          j[name] = d;
        }
        break;
      }
      case ParamValue::Kind::kString:
        j[name] = v.string_value();
        break;
      case ParamValue::Kind::kNumberList:
        j[name] = v.number_list_value();
        break;
    }
  }
  return j;
}

}  // namespace

std::optional<ParamValue> default_param(const std::string& section, const std::string& type,
                                        const std::string& name) {
  for (const TypeSpec& t : section == "optimizer" ? optimizer_specs() : scheduler_specs()) {
    if (t.canonical != type) continue;
    for (const ParamSpec& p : t.params) {
      if (p.name == name && p.has_default && !p.fallback.is_null()) return p.fallback;
    }
  }
  return std::nullopt;
}

namespace {

std::string expect_text(const ParamSpec& p) {
  switch (p.expect) {
    case Expect::kNumber:
      return p.hi_open ? "number in [" + describe(Json(p.lo)) + ", " + describe(Json(p.hi)) + ")"
                       : number_type_text(p.lo, p.hi);
    case Expect::kInt:
      return "integer";
    case Expect::kBool:
      return "bool";
    case Expect::kString:
      return p.choices.empty() ? "string" : "one of " + join(p.choices);
    case Expect::kNumberList:
      return "list of numbers in [" + describe(Json(p.lo)) + ", " + describe(Json(p.hi)) + ")";
  }
  return "?";
}

std::string default_text(const ParamSpec& p) {
  if (!p.has_default) return "no default";
  switch (p.fallback.kind()) {
    case ParamValue::Kind::kNull:
      return "null";
    case ParamValue::Kind::kBool:
      return p.fallback.bool_value() ? "true" : "false";
    case ParamValue::Kind::kNumber:
      return describe(Json(p.fallback.number_value()));
    case ParamValue::Kind::kString:
      return describe(Json(p.fallback.string_value()));
    case ParamValue::Kind::kNumberList:
      return describe(Json(p.fallback.number_list_value()));
    case ParamValue::Kind::kAuto:
      return "\"auto\"";
  }
  return "?";
}

// One row per parameter name: its type, and per type that takes it, DeepSpeed's default ("adam, adamw: 0.001").
std::vector<KeyInfo> params_catalogue(const std::vector<TypeSpec>& specs, const std::string& prefix) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> defaults;  // name -> (default, type)
  std::map<std::string, std::string> types;
  for (const TypeSpec& t : specs) {
    for (const ParamSpec& p : t.params) {
      if (!types.count(p.name)) order.push_back(p.name);
      types[p.name] = expect_text(p);
      defaults[p.name].emplace_back(default_text(p), t.canonical);
    }
  }
  std::vector<KeyInfo> rows;
  for (const std::string& name : order) {
    // Types with the same default listed together, in the table's order.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    for (const auto& [value, type] : defaults[name]) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
      if (it == groups.end()) {
        groups.push_back({value, {type}});
      } else {
        it->second.push_back(type);
      }
    }
    std::string ours = "per type:";
    for (const auto& [value, names] : groups) ours += " " + join(names) + ": " + value + ";";
    ours.pop_back();
    KeyInfo k;
    k.path = prefix + ".params." + name;
    k.type = types[name];
    k.accepts_auto = true;
    k.deepspeed = "constructor argument";
    k.ours = ours;
    rows.push_back(std::move(k));
  }
  return rows;
}

std::vector<KeyInfo> section_catalogue(const std::vector<TypeSpec>& specs, const std::string& prefix,
                                       const std::string& what) {
  KeyInfo type;
  type.path = prefix + ".type";
  type.type = "one of " + join(canonical_names(specs)) + " (any case)";
  type.default_json = "unset";
  type.deepspeed = "read from a dict";
  type.ours = "the " + what + "; its params below are DeepSpeed's per type (unknown names refused)";
  std::vector<KeyInfo> rows = {type};
  if (what == "optimizer") {
    KeyInfo fusion;
    fusion.path = prefix + ".legacy_fusion";
    fusion.type = "bool";
    fusion.default_json = "false";
    fusion.deepspeed = "read from a dict";
    fusion.ours = "no effect: DeepSpeed's choice between two fp16 optimizer wrappers; ours has one";
    rows.push_back(fusion);
  }
  for (KeyInfo& k : params_catalogue(specs, prefix)) rows.push_back(std::move(k));
  return rows;
}

}  // namespace

std::vector<KeyInfo> optimizer_catalogue(const std::string& prefix) {
  return section_catalogue(optimizer_specs(), prefix, "optimizer");
}

std::vector<KeyInfo> scheduler_catalogue(const std::string& prefix) {
  return section_catalogue(scheduler_specs(), prefix, "learning-rate schedule");
}

std::vector<std::string> known_optimizer_types() { return canonical_names(optimizer_specs()); }
std::vector<std::string> known_scheduler_types() { return canonical_names(scheduler_specs()); }

OptimizerConfig parse_optimizer_config(const Json& node) {
  ObjectReader r(node, "optimizer", nullptr);
  OptimizerConfig c;
  const TypeSpec& spec = find_type(optimizer_specs(), r, r.find("type"), "optimizer");
  c.type = spec.canonical;
  c.params = parse_params(r.find("params"), spec, "optimizer.params", "optimizer");
  r.read_bool("legacy_fusion", &c.legacy_fusion);
  r.finish_ignoring_unknown();
  return c;
}

OrderedJson dump_optimizer_config(const OptimizerConfig& c) {
  OrderedJson j;
  j["type"] = c.type;
  j["params"] = dump_params(c.params);
  j["legacy_fusion"] = c.legacy_fusion;
  return j;
}

SchedulerConfig parse_scheduler_config(const Json& node) {
  ObjectReader r(node, "scheduler", nullptr);
  SchedulerConfig c;
  const TypeSpec& spec = find_type(scheduler_specs(), r, r.find("type"), "scheduler");
  c.type = spec.canonical;
  c.params = parse_params(r.find("params"), spec, "scheduler.params", "scheduler");
  r.finish_ignoring_unknown();
  return c;
}

OrderedJson dump_scheduler_config(const SchedulerConfig& c) {
  OrderedJson j;
  j["type"] = c.type;
  j["params"] = dump_params(c.params);
  return j;
}

}  // namespace deepspeed::config
