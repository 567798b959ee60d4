// Checkpoint metadata (format, version, run id) and the checks a loader runs before trusting a
// file.
#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

#ifndef DS_VERSION
#define DS_VERSION "unknown"
#endif

namespace deepspeed::checkpoint {
namespace {

std::string shape_str(at::IntArrayRef shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace

std::string ds_version() { return DS_VERSION; }

void stamp_metadata(StateDict& state, const std::string& run_id) {
  state.insert_or_assign(kFormatKey, kCheckpointFormat);
  state.insert_or_assign(kVersionKey, ds_version());
  state.insert_or_assign(kRunIdKey, run_id);
}

void check_metadata(const StateDict& state, const std::string& file,
                    const std::string& expected_run_id) {
  auto format = state.find(kFormatKey);
  DS_CHECK_T(CheckpointError, format != state.end(), "checkpoint file ", file,
             " is not a deepspeed-cpp checkpoint (no '", kFormatKey, "' key)");
  DS_CHECK_T(CheckpointError, format->value().isInt(), "checkpoint file ", file, ": '", kFormatKey,
             "' is a ", format->value().tagKind(), ", expected an int");
  int64_t f = format->value().toInt();
  DS_CHECK_T(CheckpointError, f >= 1 && f <= kCheckpointFormat, "checkpoint file ", file, " has ",
             kFormatKey, " ", f, " but this build (deepspeed-cpp ", ds_version(),
             ") reads formats 1..", kCheckpointFormat);
  auto version = state.find(kVersionKey);
  DS_CHECK_T(CheckpointError, version != state.end() && version->value().isString(),
             "checkpoint file ", file, " has no string '", kVersionKey, "'");
  if (expected_run_id.empty()) return;
  auto run = state.find(kRunIdKey);
  DS_CHECK_T(CheckpointError, run != state.end() && run->value().isString(), "checkpoint file ",
             file, " has no string '", kRunIdKey, "'");
  const std::string& got = run->value().toStringRef();
  DS_CHECK_T(CheckpointError, got == expected_run_id, "checkpoint file ", file,
             " is from another run: ", kRunIdKey, " is '", got, "', expected '", expected_run_id,
             "'");
}

std::optional<c10::IValue> find_entry(const StateDict& state, const std::string& key_path) {
  c10::IValue current(state);
  size_t pos = 0;
  while (true) {
    size_t slash = key_path.find('/', pos);
    std::string key =
        key_path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (!current.isGenericDict()) return std::nullopt;
    c10::impl::GenericDict dict = current.toGenericDict();
    if (dict.keyType()->kind() != c10::TypeKind::StringType) return std::nullopt;
    auto it = dict.find(key);
    if (it == dict.end()) return std::nullopt;
    current = it->value();
    if (slash == std::string::npos) return current;
    pos = slash + 1;
  }
}

void check_state(const StateDict& state, const std::string& file,
                 const std::vector<std::string>& required_keys,
                 const std::vector<ExpectedTensor>& tensors) {
  for (const std::string& key : required_keys) {
    DS_CHECK_T(CheckpointError, find_entry(state, key).has_value(), "checkpoint file ", file,
               " has no key '", key, "'");
  }
  for (const ExpectedTensor& want : tensors) {
    std::optional<c10::IValue> v = find_entry(state, want.key);
    DS_CHECK_T(CheckpointError, v.has_value(), "checkpoint file ", file, " has no tensor '",
               want.key, "'");
    DS_CHECK_T(CheckpointError, v->isTensor(), "checkpoint file ", file, ": '", want.key, "' is a ",
               v->tagKind(), ", expected a tensor");
    const at::Tensor& t = v->toTensor();
    DS_CHECK_T(CheckpointError, t.sizes() == at::IntArrayRef(want.shape), "checkpoint file ", file,
               ": '", want.key, "' has shape ", shape_str(t.sizes()), ", expected ",
               shape_str(want.shape));
    DS_CHECK_T(CheckpointError, t.scalar_type() == want.dtype, "checkpoint file ", file, ": '",
               want.key, "' has dtype ", t.scalar_type(), ", expected ", want.dtype);
  }
}

}  // namespace deepspeed::checkpoint
