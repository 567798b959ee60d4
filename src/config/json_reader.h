// Typed, path-tracking reads of one JSON object of a DeepSpeed config.
//
// Each section parser walks its object with an ObjectReader: every getter names the key it accepts
// (present or not), so after the last getter the reader knows the full set of valid keys at that
// level and `finish()` can reject any other key with a did-you-mean suggestion. All errors are
// ConfigErrors starting with the JSON path. Values given as "auto" are accepted only where the
// getter allows it; the path is then recorded in `autos` and the output keeps its default.
// Not thread-safe; one reader per object per parse.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace deepspeed::config {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Throws ConfigError("<path>: <message>").
[[noreturn]] void fail_at(const std::string& path, const std::string& message);
// A value as short JSON text for messages: "abc" (quoted), 5, true, null, {...}.
std::string describe(const Json& value);
std::string join_path(const std::string& parent, const std::string& key);
// What a bounded read accepts, as its errors and the key table say it: "integer in 0..3", "number >= 0".
std::string int_type_text(int64_t lo, int64_t hi);
std::string number_type_text(double lo, double hi);

enum class AutoPolicy { kNoAuto, kAllowAuto };

// Warnings a parse collects (keys ignored as DeepSpeed ignores them): while a CollectWarnings is alive on this
// thread, ObjectReader::finish_ignoring_unknown() appends one line per unknown key to it. Without one the keys
// are ignored silently. thread_local: one parse per thread at a time.
class CollectWarnings {
 public:
  explicit CollectWarnings(std::vector<std::string>* warnings);
  ~CollectWarnings();
  CollectWarnings(const CollectWarnings&) = delete;
  CollectWarnings& operator=(const CollectWarnings&) = delete;

 private:
  std::vector<std::string>* previous_;
};

// Adds one line to the warnings being collected (CollectWarnings), if any: a key DeepSpeed ignores in context.
void warn(const std::string& line);

class ObjectReader {
 public:
  // Throws "<path>: expected an object, got ..." unless `node` is an object. `autos` may be null.
  ObjectReader(const Json& node, std::string path, std::set<std::string>* autos);

  const std::string& path() const { return path_; }
  // Where "auto" paths are recorded (may be null): nested readers share it.
  std::set<std::string>* autos() const { return autos_; }
  std::string path_of(const std::string& key) const { return join_path(path_, key); }

  // Marks `key` as valid here; returns its value or nullptr when absent.
  const Json* find(const std::string& key);

  // Each getter leaves `out` untouched and returns false when the key is absent or "auto";
  // otherwise validates, stores and returns true. Ranges are inclusive.
  bool read_bool(const std::string& key, bool* out, AutoPolicy policy = AutoPolicy::kNoAuto);
  bool read_int(const std::string& key, int64_t* out,
                int64_t lo = std::numeric_limits<int64_t>::min(),
                int64_t hi = std::numeric_limits<int64_t>::max(),
                AutoPolicy policy = AutoPolicy::kNoAuto);
  bool read_int(const std::string& key, int* out, int lo = std::numeric_limits<int>::min(),
                int hi = std::numeric_limits<int>::max(), AutoPolicy policy = AutoPolicy::kNoAuto);
  bool read_number(const std::string& key, double* out,
                   double lo = -std::numeric_limits<double>::infinity(),
                   double hi = std::numeric_limits<double>::infinity(),
                   AutoPolicy policy = AutoPolicy::kNoAuto);
  bool read_string(const std::string& key, std::string* out);
  // JSON null clears the optional.
  bool read_optional_string(const std::string& key, std::optional<std::string>* out);
  bool read_optional_int(const std::string& key, std::optional<int64_t>* out,
                         int64_t lo = std::numeric_limits<int64_t>::min(),
                         int64_t hi = std::numeric_limits<int64_t>::max());
  bool read_optional_int(const std::string& key, std::optional<int>* out, int lo, int hi);
  bool read_string_list(const std::string& key, std::vector<std::string>* out);
  // One of `choices`, matched case-insensitively when asked; stores the canonical spelling.
  bool read_choice(const std::string& key, std::string* out,
                   const std::vector<std::string>& choices, bool case_insensitive = false);

  // DeepSpeed's pydantic sections take pydantic's string booleans ("true", "False", "yes", "0", ...); the levels it
  // reads as plain dicts would take any non-empty string as true, so there a string stays an error.
  void take_string_booleans() { string_booleans_ = true; }

  // DeepSpeed accepts some keys under two names (`stage3_prefetch_bucket_size` and its field name
  // `prefetch_bucket_size`). Returns the one present (or `name`); both present is an error.
  std::string pick_alias(const std::string& name, const std::string& alias);

  // Rejects any key no getter asked for: `<path>.<key>: unknown key (did you mean '<k>'?)`. For DeepSpeed's
  // pydantic sections, which forbid extra keys.
  void finish() const;
  // Where DeepSpeed reads the object as a plain dict (its top level, aio, activation_checkpointing, checkpoint,
  // data_types, flops_profiler, autotuning, pipeline, timers, the optimizer's and scheduler's own level) and goes
  // on past keys it does not know: each unknown key becomes a warning line (CollectWarnings) naming it, with its
  // did-you-mean.
  void finish_ignoring_unknown() const;

  // Conversions shared with the section parsers (value at `path`).
  static int64_t to_int(const Json& value, const std::string& path, int64_t lo, int64_t hi);
  static double to_number(const Json& value, const std::string& path, double lo, double hi);

 private:
  bool take_auto(const std::string& key, const Json& value, AutoPolicy policy);
  // The object's keys no getter asked for, in the object's order; `valid` gets the ones asked for.
  std::vector<std::string> unknown_keys(std::vector<std::string>* valid) const;

  const Json& node_;
  std::string path_;
  std::set<std::string>* autos_;
  std::set<std::string> known_;
  bool string_booleans_ = false;
};

// Parses config text as DeepSpeed's hjson reader reads JSON-shaped files: JSON plus `#`, `//` and
// `/* */` comments, optional commas and one trailing comma (json_text.cc has the rules). Errors
// name `source` with line and column (`ds.json:3:14: invalid JSON: ...`); duplicate keys are an
// error (`ds.json:2:3: zero_optimization.stage: duplicate key`), as in DeepSpeed.
Json parse_json_text(const std::string& text, const std::string& source);

}  // namespace deepspeed::config
