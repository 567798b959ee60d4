// Exceptions thrown by deepspeed-cpp and the checks that raise them.
//
// DS_CHECK reports a caller's mistake (bad config value, bad argument, missing file) and should carry the values
// that explain it; DS_ASSERT guards our own invariants and means a bug in deepspeed-cpp. Typed subclasses exist
// where a caller must tell errors apart (a config error at start-up versus a dead peer mid-training).
// This header is light on purpose: config and launcher code include it without pulling in LibTorch.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace deepspeed {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A DeepSpeed JSON config that cannot be used; the message names the JSON path.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A collective failed or diverged across ranks.
class CommError : public Error {
 public:
  using Error::Error;
};

// A collective did not complete within the process group's timeout (a dead or diverged peer).
class CommTimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// Bad launcher input: hostfile, --include/--exclude, flags.
class LaunchError : public Error {
 public:
  using Error::Error;
};

// Bad training data: a tokenized corpus (.bin/.idx), its sample index, a dataset description or a tokenizer file.
// The message names the file (and the entry) on one line.
class DataError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// `text` made safe to print inside a one-line message: a control byte (NUL, newline, escape, ...)
// or DEL becomes \xNN and a backslash \\, so text read from a file or a JSON key can neither cut
// the message (a NUL ends a C string) nor split it over lines or drive the terminal. Bytes of 0x80
// and up pass unchanged (UTF-8 stays readable).
inline std::string printable(const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}
}  // namespace detail

}  // namespace deepspeed

// Throws `type` with the concatenated message when `cond` is false.
#define DS_CHECK_T(type, cond, ...)                                       \
  do {                                                                   \
    if (!(cond)) throw type(::deepspeed::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define DS_CHECK(cond, ...) DS_CHECK_T(::deepspeed::Error, cond, __VA_ARGS__)

// An internal invariant; failing it is a deepspeed-cpp bug, so the message says where.
#define DS_ASSERT(cond, ...)                                                                        \
  do {                                                                                              \
    if (!(cond))                                                                                    \
      throw ::deepspeed::Error(::deepspeed::detail::str_cat("internal error at ", __FILE__, ":",   \
                                                            __LINE__, ": ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
