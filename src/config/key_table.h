// The table of a config's keys: each section is a list of Fields, and each Field says once how its key is read
// (name, aliases, type, range, "auto"), how it is written back, and what it means here. Parsing, dumping,
// `ds_check_config --explain`, the README's key table and the did-you-mean lists (the reader's known keys) all come
// from these lists, so a key is spelled in one place.
//
// A Section is built once (a function-local static) and read by any thread; parse() keeps its state on the stack.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/json_reader.h"

namespace deepspeed::config {

// How DeepSpeed reads a section, which decides what happens to a key it does not know there.
enum class SectionKind {
  kPydantic,  // a pydantic model: extra keys refused, string booleans ("true", "no") taken
  kDict,      // read from a plain dict: unknown keys ignored (a warning here), booleans must be booleans
};

// One key as a user sees it (ds_check_config --explain, the README's key table).
struct KeyInfo {
  std::string path;                  // "zero_optimization.stage"
  std::vector<std::string> aliases;  // other spellings DeepSpeed accepts, as full paths
  std::string type;                  // "bool", "integer in 0..3", "section", ...
  std::string default_json;          // the default as compact JSON; "" for a section
  bool accepts_auto = false;
  std::string deepspeed;  // how DeepSpeed treats the key
  std::string ours;       // what it does here
  // False for a key a dump leaves out at its default (removed_in_deepspeed, dumped_when_set): DeepSpeed 0.19.8
  // refuses it.
  bool dumped_at_default = true;
};

// "one of none, cpu, nvme".
std::string choice_type_text(const std::vector<std::string>& choices);

// An optional as its value or null, for dumps.
template <typename T>
OrderedJson optional_json(const std::optional<T>& value) {
  return value ? OrderedJson(*value) : OrderedJson(nullptr);
}

template <class S>
struct Field {
  std::string name;
  std::vector<std::string> aliases;
  std::string type;
  bool accepts_auto = false;
  std::string ours;
  // Reads the key (`key` is whichever spelling the object holds) into `s`; absent leaves `s` as it is.
  std::function<void(ObjectReader& r, const std::string& key, S& s)> read;
  // The value to write back, or nullopt to leave the key out of the dump.
  std::function<std::optional<OrderedJson>(const S& s)> dump;
  // A nested section's own keys (below `prefix`), for the catalogue.
  std::function<std::vector<KeyInfo>(const std::string& prefix)> children;
  // The catalogue's default where the dump leaves the key out (removed_in_deepspeed, dumped_when_set).
  std::function<std::optional<OrderedJson>(const S& s)> default_value;

  Field& alias(std::string other) {
    aliases.push_back(std::move(other));
    return *this;
  }
};

template <class S>
class Section;

// Lists `section`'s keys below a custom field in the catalogue (the field reads them itself). `suffix` "[]" marks
// a list of such objects (tensor_parallel.partition_config.layer_specs[].patterns).
template <class S, class M>
Field<S> with_keys_of(Field<S> f, const Section<M>& section, const std::string& suffix = "") {
  const Section<M>* sec = &section;
  f.children = [sec, suffix](const std::string& prefix) { return sec->keys(prefix + suffix); };
  return f;
}

template <class S>
class Section {
 public:
  using Check = std::function<void(ObjectReader& r, S& s)>;

  // `check` runs after every key is read (rules between this section's keys).
  Section(SectionKind kind, std::vector<Field<S>> fields, Check check = {})
      : kind_(kind), fields_(std::move(fields)), check_(std::move(check)) {}

  // Parses `node` (an object at `path`) into a default S.
  S parse(const Json& node, const std::string& path, std::set<std::string>* autos) const {
    S s{};
    parse_into(node, path, autos, s);
    return s;
  }

  // The same into an existing S: for a JSON object whose keys live in its parent's struct (partition_config).
  void parse_into(const Json& node, const std::string& path, std::set<std::string>* autos, S& s) const {
    ObjectReader r(node, path, autos);
    read_into(r, s);
    finish(r, s);
  }

  // The two halves of parse() for a level that reads more than its table (the top level).
  void read_into(ObjectReader& r, S& s) const {
    if (kind_ == SectionKind::kPydantic) r.take_string_booleans();
    for (const Field<S>& f : fields_) {
      std::string key = f.name;
      for (const std::string& a : f.aliases) key = r.pick_alias(key, a);
      f.read(r, key, s);
    }
  }
  void finish(ObjectReader& r, S& s) const {
    if (kind_ == SectionKind::kPydantic) {
      r.finish();
    } else {
      r.finish_ignoring_unknown();
    }
    if (check_) check_(r, s);
  }

  OrderedJson dump(const S& s) const {
    OrderedJson j = OrderedJson::object();
    for (const Field<S>& f : fields_) {
      if (std::optional<OrderedJson> v = f.dump(s)) j[f.name] = std::move(*v);
    }
    return j;
  }

  std::vector<KeyInfo> keys(const std::string& prefix) const {
    const OrderedJson defaults = dump(S{});
    std::vector<KeyInfo> out;
    for (const Field<S>& f : fields_) {
      KeyInfo k;
      k.path = join_path(prefix, f.name);
      for (const std::string& a : f.aliases) k.aliases.push_back(join_path(prefix, a));
      k.type = f.type;
      k.accepts_auto = f.accepts_auto;
      k.ours = f.ours;
      k.deepspeed = kind_ == SectionKind::kPydantic ? "pydantic field" : "read from a dict";
      if (f.default_value) {
        const std::optional<OrderedJson> d = f.default_value(S{});
        k.default_json = d ? d->dump() : "unset";
        k.dumped_at_default = false;
      } else if (!f.children) {
        k.default_json = defaults.contains(f.name) ? defaults[f.name].dump() : "unset";
      }
      const std::string path = k.path;
      out.push_back(std::move(k));
      if (f.children) {
        for (KeyInfo& c : f.children(path)) out.push_back(std::move(c));
      }
    }
    return out;
  }

 private:
  SectionKind kind_;
  std::vector<Field<S>> fields_;
  Check check_;
};

// ---- Field makers: one per kind of value. `ours` says what the key does here. ----

template <class S>
Field<S> bool_key(std::string name, bool S::*m, std::string ours, AutoPolicy policy = AutoPolicy::kNoAuto) {
  Field<S> f{std::move(name), {}, "bool", policy == AutoPolicy::kAllowAuto, std::move(ours)};
  f.read = [m, policy](ObjectReader& r, const std::string& key, S& s) { r.read_bool(key, &(s.*m), policy); };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

template <class S, class I>
Field<S> int_key(std::string name, I S::*m, I lo, I hi, std::string ours, AutoPolicy policy = AutoPolicy::kNoAuto) {
  Field<S> f{std::move(name), {}, int_type_text(lo, hi), policy == AutoPolicy::kAllowAuto, std::move(ours)};
  f.read = [m, lo, hi, policy](ObjectReader& r, const std::string& key, S& s) {
    r.read_int(key, &(s.*m), lo, hi, policy);
  };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

template <class S, class I>
Field<S> int_key(std::string name, I S::*m, I lo, std::string ours) {
  return int_key(std::move(name), m, lo, std::numeric_limits<I>::max(), std::move(ours));
}

template <class S>
Field<S> number_key(std::string name, double S::*m, double lo, double hi, std::string ours,
                    AutoPolicy policy = AutoPolicy::kNoAuto) {
  Field<S> f{std::move(name), {}, number_type_text(lo, hi), policy == AutoPolicy::kAllowAuto, std::move(ours)};
  f.read = [m, lo, hi, policy](ObjectReader& r, const std::string& key, S& s) {
    r.read_number(key, &(s.*m), lo, hi, policy);
  };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

template <class S>
Field<S> string_key(std::string name, std::string S::*m, std::string ours) {
  Field<S> f{std::move(name), {}, "string", false, std::move(ours)};
  f.read = [m](ObjectReader& r, const std::string& key, S& s) { r.read_string(key, &(s.*m)); };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

// null clears it; dumped as null when unset.
template <class S>
Field<S> optional_string_key(std::string name, std::optional<std::string> S::*m, std::string ours) {
  Field<S> f{std::move(name), {}, "string or null", false, std::move(ours)};
  f.read = [m](ObjectReader& r, const std::string& key, S& s) { r.read_optional_string(key, &(s.*m)); };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(optional_json(s.*m)); };
  return f;
}

template <class S, class I>
Field<S> optional_int_key(std::string name, std::optional<I> S::*m, I lo, std::string ours) {
  const I hi = std::numeric_limits<I>::max();
  Field<S> f{std::move(name), {}, int_type_text(lo, hi) + " or null", false, std::move(ours)};
  f.read = [m, lo, hi](ObjectReader& r, const std::string& key, S& s) { r.read_optional_int(key, &(s.*m), lo, hi); };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(optional_json(s.*m)); };
  return f;
}

template <class S>
Field<S> string_list_key(std::string name, std::vector<std::string> S::*m, std::string ours) {
  Field<S> f{std::move(name), {}, "list of strings", false, std::move(ours)};
  f.read = [m](ObjectReader& r, const std::string& key, S& s) { r.read_string_list(key, &(s.*m)); };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

template <class S>
Field<S> choice_key(std::string name, std::string S::*m, std::vector<std::string> choices, std::string ours,
                    bool case_insensitive = false) {
  Field<S> f{std::move(name), {}, choice_type_text(choices), false, std::move(ours)};
  f.read = [m, choices, case_insensitive](ObjectReader& r, const std::string& key, S& s) {
    r.read_choice(key, &(s.*m), choices, case_insensitive);
  };
  f.dump = [m](const S& s) { return std::optional<OrderedJson>(s.*m); };
  return f;
}

// A nested section stored in member `m`; JSON null or absent keeps the default.
template <class S, class M>
Field<S> section_key(std::string name, M S::*m, const Section<M>& section, std::string ours) {
  Field<S> f{name, {}, "section", false, std::move(ours)};
  const Section<M>* sec = &section;
  f.read = [m, sec](ObjectReader& r, const std::string& key, S& s) {
    const Json* v = r.find(key);
    if (v && !v->is_null()) s.*m = sec->parse(*v, r.path_of(key), r.autos());
  };
  f.dump = [m, sec](const S& s) { return std::optional<OrderedJson>(sec->dump(s.*m)); };
  f.children = [sec](const std::string& prefix) { return sec->keys(prefix); };
  return f;
}

// A key DeepSpeed 0.19.8 removed (its config refuses the key even at its default value) that older configs carry:
// read as `f` reads it, never dumped, so that a config this build writes is one DeepSpeed reads. Each such key is
// accepted only at its default (feature_gate.cc), so leaving it out of the dump loses nothing.
template <class S>
Field<S> removed_in_deepspeed(Field<S> f) {
  f.default_value = f.dump;
  f.dump = [](const S&) { return std::optional<OrderedJson>(); };
  return f;
}

// A key of this build that DeepSpeed 0.19.8's pydantic section does not have (it refuses extra keys): dumped only
// when it differs from the default, so that a config not using it dumps to one DeepSpeed reads.
template <class S>
Field<S> dumped_when_set(Field<S> f) {
  auto dump = f.dump;
  f.default_value = dump;
  f.dump = [dump](const S& s) {
    std::optional<OrderedJson> mine = dump(s), plain = dump(S{});
    return mine == plain ? std::optional<OrderedJson>() : mine;
  };
  return f;
}

// A DeepSpeed section this build does not implement: accepted only when absent, null or {"enabled": false ...}, so
// a config written for DeepSpeed never silently loses a feature it asked for. Not dumped.
template <class S>
Field<S> disabled_only_key(std::string name, const std::string& what) {
  Field<S> f{std::move(name), {}, "section", false, "not implemented: refused unless \"enabled\": false"};
  f.read = [what](ObjectReader& r, const std::string& key, S&) {
    const Json* v = r.find(key);
    if (!v || v->is_null()) return;
    const bool disabled =
        v->is_object() && v->contains("enabled") && (*v)["enabled"].is_boolean() && !(*v)["enabled"].get<bool>();
    if (!disabled)
      fail_at(r.path_of(key), "DeepSpeed's " + what +
                                  " is not supported by deepspeed-cpp; remove it or set "
                                  "\"enabled\": false");
  };
  f.dump = [](const S&) { return std::optional<OrderedJson>(); };
  return f;
}

// A key DeepSpeed offers that deepspeed-cpp has no form of: accepted only at `allowed`, the value that means "not
// used" (null counts as not given). Not dumped.
template <class S>
Field<S> refused_key(std::string name, const Json& allowed, const std::string& why) {
  Field<S> f{std::move(name), {}, "only " + allowed.dump(), false, "refused unless " + allowed.dump() + ": " + why};
  f.read = [allowed, why](ObjectReader& r, const std::string& key, S&) {
    const Json* v = r.find(key);
    if (v && !v->is_null() && *v != allowed) fail_at(r.path_of(key), "is not supported by deepspeed-cpp (" + why + ")");
  };
  f.dump = [](const S&) { return std::optional<OrderedJson>(); };
  return f;
}

// A key whose reading or writing is its own (a value with a context-dependent meaning, an enum with its own
// spelling): the caller gives both halves.
template <class S>
Field<S> custom_key(std::string name, std::string type, std::string ours,
                    std::function<void(ObjectReader&, const std::string&, S&)> read,
                    std::function<std::optional<OrderedJson>(const S&)> dump, bool accepts_auto = false) {
  Field<S> f{std::move(name), {}, std::move(type), accepts_auto, std::move(ours)};
  f.read = std::move(read);
  f.dump = std::move(dump);
  return f;
}

}  // namespace deepspeed::config
