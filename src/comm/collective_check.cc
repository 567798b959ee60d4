// See collective_check.h.
#include "comm/collective_check.h"

#include <algorithm>
#include <thread>

namespace deepspeed::comm::detail {
namespace {

using ::deepspeed::detail::str_cat;

std::string key_for(uint64_t seq, int group_rank) { return str_cat("chk/", seq, "/", group_rank); }

}  // namespace

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float";
    case at::kDouble:
      return "double";
    case at::kHalf:
      return "half";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(t);
  }
}

std::string tensor_desc(const at::Tensor& t) {
  std::string s = dtype_name(t.scalar_type()) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string format_duration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms % 60000 == 0 && ms >= 60000) return str_cat(ms / 60000, "min");
  if (ms % 1000 == 0 && ms >= 1000) return str_cat(ms / 1000, "s");
  if (ms >= 1000) return str_cat(ms / 1000.0, "s");
  return str_cat(ms, "ms");
}

void check_collective(KeyValueStore& store, const GroupView& group, uint64_t seq,
                      const Fingerprint& fp) {
  const int n = static_cast<int>(group.ranks.size());
  store.set(key_for(seq, group.group_rank), fp.key + "\n" + fp.description);

  // Poll with check() rather than a blocking wait: a timed-out TCPStore wait leaves its reply
  // pending on the socket, and polling also tells which members are missing. Debug mode, so a few
  // ms of latency are fine.
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(key_for(seq, r));
  auto deadline = std::chrono::steady_clock::now() + group.timeout;
  auto pause = std::chrono::microseconds(50);
  while (!store.check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < n; ++r) {
        if (!store.check({keys[r]}))
          missing += (missing.empty() ? "" : ",") + std::to_string(group.ranks[r]);
      }
      throw CommTimeoutError(str_cat("rank ", group.ranks[group.group_rank], " timed out after ",
                                     format_duration(group.timeout), " in collective #", seq, " ",
                                     fp.description, " on group ", group.name, ": rank(s) ",
                                     missing, " did not reach it (check mode)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }

  std::vector<std::string> keys_seen(n), descs(n);
  for (int r = 0; r < n; ++r) {
    std::string v = store.get(keys[r]);
    size_t nl = v.find('\n');
    keys_seen[r] = v.substr(0, nl);
    descs[r] = nl == std::string::npos ? v : v.substr(nl + 1);
  }
  // Every member has now published `seq`, so all have finished reading `seq - 1`: our old key can
  // go.
  if (seq > 1) store.remove(key_for(seq - 1, group.group_rank));

  for (int r = 1; r < n; ++r) {
    if (keys_seen[r] != keys_seen[0]) {
      throw CommError(str_cat("collective #", seq, " diverged on group ", group.name, ": rank ",
                              group.ranks[0], " called ", descs[0], ", rank ", group.ranks[r],
                              " called ", descs[r]));
    }
  }
}

}  // namespace deepspeed::comm::detail
