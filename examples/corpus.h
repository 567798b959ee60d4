// The training text for the examples: a file given by the user, or the license texts every Debian machine ships
// under /usr/share/common-licenses, read as bytes (byte-level tokens, vocabulary 256).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace examples {

// All bytes of `path`, or of every regular file under /usr/share/common-licenses (sorted by name) when empty.
// Throws std::runtime_error naming the file that could not be read.
std::string load_corpus(const std::string& path);

// Windows of seq_len + 1 tokens taken every seq_len bytes: [num_windows, seq_len + 1] int64.
at::Tensor make_windows(const std::string& text, int64_t seq_len);

}  // namespace examples
