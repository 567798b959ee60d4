// IndexedDataset and IndexedDatasetBuilder (deepspeed/data/indexed_dataset.h): the MMIDIDX index checked whole on
// open, sequences copied out of the mapped .bin and widened to int64.
#include "deepspeed/data/indexed_dataset.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "checkpoint/mapped_file.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype code, sequence count, document count

template <typename T>
T load_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::shared_ptr<const checkpoint::MappedFile> map(const std::string& path) {
  try {
    return checkpoint::MappedFile::open(path);
  } catch (const Error& e) {  // missing or unreadable: the corpus's fault, named as such
    throw DataError(e.what());
  }
}

bool known_type(uint8_t code) { return code == 1 || code == 2 || code == 3 || code == 4 || code == 5 || code == 8; }

// Token ids widened to int64: `n` values of `type` from `src`.
void widen(TokenType type, const char* src, int64_t n, int64_t* out) {
  auto copy = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(load_le<T>(src + i * sizeof(T)));
  };
  switch (type) {
    case TokenType::kUInt8:
      copy(uint8_t{});
      break;
    case TokenType::kInt8:
      copy(int8_t{});
      break;
    case TokenType::kInt16:
      copy(int16_t{});
      break;
    case TokenType::kInt32:
      copy(int32_t{});
      break;
    case TokenType::kInt64:
      copy(int64_t{});
      break;
    case TokenType::kUInt16:
      copy(uint16_t{});
      break;
  }
}

// The range of ids `type` holds.
std::pair<int64_t, int64_t> token_range(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
      return {0, 255};
    case TokenType::kInt8:
      return {-128, 127};
    case TokenType::kInt16:
      return {-32768, 32767};
    case TokenType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case TokenType::kInt64:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case TokenType::kUInt16:
      return {0, 65535};
  }
  return {0, 0};
}

}  // namespace

size_t token_bytes(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
    case TokenType::kInt8:
      return 1;
    case TokenType::kInt16:
    case TokenType::kUInt16:
      return 2;
    case TokenType::kInt32:
      return 4;
    case TokenType::kInt64:
      return 8;
  }
  return 0;
}

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::kUInt8:
      return "uint8";
    case TokenType::kInt8:
      return "int8";
    case TokenType::kInt16:
      return "int16";
    case TokenType::kInt32:
      return "int32";
    case TokenType::kInt64:
      return "int64";
    case TokenType::kUInt16:
      return "uint16";
  }
  return "?";
}

TokenType token_type_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenType::kUInt16 : TokenType::kInt32;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  idx_ = map(idx_path);
  const char* p = idx_->data();
  const size_t size = idx_->size();
  DS_CHECK_T(DataError, size >= kHeaderBytes, idx_path, ": ", size, " bytes, shorter than the ", kHeaderBytes,
             "-byte MMIDIDX header (not an indexed dataset's .idx, or truncated)");
  DS_CHECK_T(
      DataError, std::memcmp(p, kMagic, sizeof(kMagic)) == 0, idx_path,
      ": no MMIDIDX magic (not a Megatron/DeepSpeed mmap indexed dataset; the older 'TNTIDX' format is not read)");
  const uint64_t version = load_le<uint64_t>(p + 9);
  DS_CHECK_T(DataError, version == 1, idx_path, ": index version ", version, " (only version 1 exists)");
  const uint8_t code = load_le<uint8_t>(p + 17);
  DS_CHECK_T(
      DataError, known_type(code), idx_path, ": dtype code ", static_cast<int>(code),
      code == 6 || code == 7 ? " is a float type, which holds no token ids" : " is not one of the format's (1-8)");
  type_ = static_cast<TokenType>(code);
  const uint64_t n = load_le<uint64_t>(p + 18), docs = load_le<uint64_t>(p + 26);
  // 12 bytes per sequence, 8 per document index: both counts bounded by the file's size before any arithmetic.
  DS_CHECK_T(DataError, n <= size / 12 && docs <= size / 8, idx_path, ": the header counts ", n, " sequences and ",
             docs, " document indices, more than its ", size, " bytes hold (truncated, or not an index)");
  const size_t want = kHeaderBytes + 12 * n + 8 * docs;
  DS_CHECK_T(DataError, size != want + n || n == 0, idx_path,
             ": the index carries per-sequence modes (a multimodal dataset), which this reader does not take");
  DS_CHECK_T(DataError, size == want, idx_path, ": ", size, " bytes, but ", n, " sequences and ", docs,
             " document indices make ", want, " (truncated, or written by another tool)");
  DS_CHECK_T(DataError, n > 0, idx_path, ": the corpus holds no sequences (an empty input?)");
  DS_CHECK_T(DataError, docs >= 2, idx_path, ": ", docs,
             " document indices; a corpus needs at least 2 (0 and the sequence count)");
  num_sequences_ = static_cast<int64_t>(n);
  num_documents_ = static_cast<int64_t>(docs) - 1;
  lengths_at_ = kHeaderBytes;
  pointers_at_ = lengths_at_ + 4 * n;
  documents_at_ = pointers_at_ + 8 * n;

  bin_ = map(bin_path);
  const uint64_t bin_size = bin_->size(), item = token_bytes(type_);
  DS_CHECK_T(DataError, bin_size % item == 0, bin_path, ": ", bin_size, " bytes, not a whole number of ",
             token_type_name(type_), " tokens (truncated?)");
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int64_t length = sequence_length(i);
    const int64_t pointer = load_le<int64_t>(p + pointers_at_ + 8 * static_cast<size_t>(i));
    DS_CHECK_T(DataError, length >= 0, idx_path, ": sequence ", i, " has length ", length);
    DS_CHECK_T(DataError,
               pointer >= 0 && static_cast<uint64_t>(pointer) % item == 0 &&
                   static_cast<uint64_t>(pointer) <= bin_size &&
                   static_cast<uint64_t>(length) <= (bin_size - static_cast<uint64_t>(pointer)) / item,
               idx_path, ": sequence ", i, " (", length, " ", token_type_name(type_), " tokens at byte ", pointer,
               ") lies outside ", bin_path, "'s ", bin_size, " bytes (truncated .bin, or an index of another corpus)");
    num_tokens_ += length;
  }
  int64_t previous = 0;
  for (int64_t k = 0; k <= num_documents_; ++k) {
    const int64_t first = document_index(k);
    DS_CHECK_T(DataError, (k == 0 ? first == 0 : first >= previous) && first <= num_sequences_, idx_path,
               ": document index ", k, " is ", first, "; they must rise from 0 to the sequence count ", num_sequences_);
    previous = first;
  }
  DS_CHECK_T(DataError, previous == num_sequences_, idx_path, ": the last document index is ", previous,
             ", not the sequence count ", num_sequences_, " (sequences outside any document)");
  DS_CHECK_T(DataError, num_tokens_ > 0, prefix, ": the corpus holds no tokens");
  idx_->drop_pages(0, idx_->size());  // checked: the pages go back until a sample needs them
}

IndexedDataset::~IndexedDataset() = default;
IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;

int64_t IndexedDataset::sequence_length(int64_t i) const {
  return load_le<int32_t>(idx_->data() + lengths_at_ + 4 * static_cast<size_t>(i));
}

int64_t IndexedDataset::document_index(int64_t k) const {
  return load_le<int64_t>(idx_->data() + documents_at_ + 8 * static_cast<size_t>(k));
}

void IndexedDataset::read(int64_t i, int64_t offset, int64_t length, int64_t* out) const {
  DS_CHECK_T(DataError, i >= 0 && i < num_sequences_, prefix_, ": sequence ", i, " of ", num_sequences_);
  const int64_t total = sequence_length(i);
  if (length < 0) length = total - offset;
  DS_CHECK_T(DataError, offset >= 0 && length >= 0 && offset + length <= total, prefix_, ": tokens [", offset, ", ",
             offset + length, ") of sequence ", i, ", which has ", total);
  const size_t item = token_bytes(type_);
  const size_t begin = static_cast<size_t>(load_le<int64_t>(idx_->data() + pointers_at_ + 8 * static_cast<size_t>(i))) +
                       static_cast<size_t>(offset) * item;
  widen(type_, bin_->data() + begin, length, out);
  // Every kDropEveryBytes read, the whole mapping's pages go back. Not the read range's pages after each read: a
  // page fault maps a whole page-cache folio or fault-around window (up to 2 MB), so re-touching a page beside
  // dropped ones (the next sample in the same page, or any shuffled read) maps them all back in, and the resident
  // set would grow to the file.
  const int64_t bytes = length * static_cast<int64_t>(item);
  if (read_since_drop_->fetch_add(bytes) + bytes >= kDropEveryBytes) {
    read_since_drop_->store(0);
    bin_->drop_pages(0, bin_->size());
  }
}

at::Tensor IndexedDataset::get(int64_t i, int64_t offset, int64_t length) const {
  DS_CHECK_T(DataError, i >= 0 && i < num_sequences_, prefix_, ": sequence ", i, " of ", num_sequences_);
  if (length < 0) length = sequence_length(i) - offset;
  DS_CHECK_T(DataError, length >= 0, prefix_, ": offset ", offset, " past the end of sequence ", i);
  at::Tensor out = at::empty({length}, at::kLong);
  read(i, offset, length, out.data_ptr<int64_t>());
  return out;
}

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, TokenType type)
    : prefix_(prefix), bin_temp_(checkpoint::temporary_path(prefix + ".bin")), type_(type) {
  bin_ = std::fopen(bin_temp_.c_str(), "wb");
  DS_CHECK_T(DataError, bin_ != nullptr, bin_temp_, ": cannot create: ", std::strerror(errno));
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) std::remove(bin_temp_.c_str());
}

void IndexedDatasetBuilder::add_sequence(std::span<const int64_t> tokens) {
  DS_CHECK_T(DataError, !finished_, prefix_, ": add_sequence after finish()");
  DS_CHECK_T(DataError, tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), prefix_,
             ": a sequence of ", tokens.size(), " tokens is longer than the index's int32 lengths hold");
  const auto [lo, hi] = token_range(type_);
  const size_t item = token_bytes(type_);
  buffer_.resize(tokens.size() * item);
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int64_t t = tokens[j];
    DS_CHECK_T(DataError, t >= lo && t <= hi, prefix_, ": token ", t, " (sequence ", lengths_.size(), ", position ", j,
               ") does not fit ", token_type_name(type_));
    switch (type_) {
      case TokenType::kUInt8:
        buffer_[j] = static_cast<char>(static_cast<uint8_t>(t));
        break;
      case TokenType::kInt8:
        buffer_[j] = static_cast<char>(static_cast<int8_t>(t));
        break;
      case TokenType::kInt16: {
        const int16_t v = static_cast<int16_t>(t);
        std::memcpy(&buffer_[2 * j], &v, 2);
        break;
      }
      case TokenType::kUInt16: {
        const uint16_t v = static_cast<uint16_t>(t);
        std::memcpy(&buffer_[2 * j], &v, 2);
        break;
      }
      case TokenType::kInt32: {
        const int32_t v = static_cast<int32_t>(t);
        std::memcpy(&buffer_[4 * j], &v, 4);
        break;
      }
      case TokenType::kInt64:
        std::memcpy(&buffer_[8 * j], &t, 8);
        break;
    }
  }
  DS_CHECK_T(DataError, buffer_.empty() || std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) == buffer_.size(),
             bin_temp_, ": write failed: ", std::strerror(errno));
  bytes_ += static_cast<int64_t>(buffer_.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() { document_indices_.push_back(static_cast<int64_t>(lengths_.size())); }

void IndexedDatasetBuilder::finish() {
  DS_CHECK_T(DataError, !finished_, prefix_, ": finish() called twice");
  if (document_indices_.back() != static_cast<int64_t>(lengths_.size())) end_document();
  DS_CHECK_T(DataError, !lengths_.empty(), prefix_, ": no sequence was added; an empty corpus is not written");
  DS_CHECK_T(DataError, std::fflush(bin_) == 0 && ::fsync(::fileno(bin_)) == 0, bin_temp_,
             ": cannot write: ", std::strerror(errno));
  std::fclose(bin_);
  bin_ = nullptr;
  auto* fs = checkpoint::default_file_system();
  fs->rename_file(bin_temp_, prefix_ + ".bin");
  std::string idx(kMagic, sizeof(kMagic));
  auto put = [&idx](const void* v, size_t n) { idx.append(static_cast<const char*>(v), n); };
  const uint64_t version = 1, n = lengths_.size(), docs = document_indices_.size();
  const uint8_t code = static_cast<uint8_t>(type_);
  put(&version, 8);
  put(&code, 1);
  put(&n, 8);
  put(&docs, 8);
  put(lengths_.data(), 4 * n);
  int64_t pointer = 0;
  const int64_t item = static_cast<int64_t>(token_bytes(type_));
  for (const int32_t length : lengths_) {
    put(&pointer, 8);
    pointer += length * item;
  }
  put(document_indices_.data(), 8 * docs);
  checkpoint::write_file_atomic(prefix_ + ".idx", idx.data(), idx.size());
  finished_ = true;
}

}  // namespace deepspeed::data
