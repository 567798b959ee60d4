#include "corpus.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace examples {
namespace {

constexpr const char* kDefaultCorpusDir = "/usr/share/common-licenses";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read data file '" + path + "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

std::string load_corpus(const std::string& path) {
  if (!path.empty()) return read_file(path);
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kDefaultCorpusDir, ec)) {
    // GPL, LGPL... are symlinks to versioned files; reading only regular files avoids duplicated text.
    if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path().string());
  }
  if (ec || files.empty())
    throw std::runtime_error(std::string("no default corpus under ") + kDefaultCorpusDir + "; pass --data FILE");
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += read_file(f);
  return text;
}

at::Tensor make_windows(const std::string& text, int64_t seq_len) {
  const int64_t n = static_cast<int64_t>(text.size());
  if (n < seq_len + 1)
    throw std::runtime_error("corpus of " + std::to_string(n) + " bytes is shorter than one sequence of " +
                             std::to_string(seq_len + 1));
  const int64_t windows = (n - 1) / seq_len;
  at::Tensor bytes = at::empty({n}, at::kLong);
  auto* out = bytes.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(text[i]);
  return bytes.narrow(0, 0, windows * seq_len + 1).unfold(0, seq_len + 1, seq_len).contiguous();
}

}  // namespace examples
