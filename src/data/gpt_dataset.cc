// GPTDataset (deepspeed/data/gpt_dataset.h): megatron-core's GPTDataset index construction (gpt_dataset.py's
// _build_document_sample_shuffle_indices and helpers.cpp's build_sample_idx, with add_extra_token_to_sequence and
// drop_last_partial_sequence on, as for training), its NumPy draws reproduced by NumpyRandomState, and the three
// indices kept in one memory-mapped cache file.
#include "deepspeed/data/gpt_dataset.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "checkpoint/mapped_file.h"
#include "data/numpy_random.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

constexpr char kIndexMagic[8] = {'D', 'S', 'G', 'P', 'T', 'I', 'D', 'X'};
constexpr int64_t kExtraToken = 1;  // each sample holds sequence_length + 1 tokens

// Everything the indices depend on, written first in the cache file and compared on load.
struct Header {
  char magic[8];
  uint64_t version;
  int64_t corpus_sequences;
  int64_t corpus_tokens;
  uint64_t lengths_hash;  // FNV-1a of the split's sequence lengths: another corpus with the same counts differs
  int64_t sequence_length;
  int64_t requested_samples;
  int64_t seed;
  int64_t first_sequence;
  int64_t end_sequence;
  int64_t num_epochs;
  int64_t num_samples;
  int64_t document_index_size;
};

uint64_t lengths_hash(const IndexedDataset& corpus, int64_t first, int64_t end) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = first; i < end; ++i) {
    const uint64_t v = static_cast<uint64_t>(corpus.sequence_length(i));
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ULL;
  }
  return h;
}

size_t padded(size_t bytes) { return (bytes + 7) / 8 * 8; }

size_t file_size(const Header& h) {
  return sizeof(Header) + padded(4 * static_cast<size_t>(h.document_index_size)) +
         8 * 2 * static_cast<size_t>(h.num_samples + 1) + 8 * static_cast<size_t>(h.num_samples);
}

// Megatron's _build_document_index: the split's sequences once per epoch, shuffled over all epochs, or over all but
// the last and then the last alone.
void append_document_index(std::vector<int32_t>& out, int64_t first, int64_t end, int64_t epochs,
                           NumpyRandomState& rng) {
  std::vector<int32_t> part;
  part.reserve(static_cast<size_t>((end - first) * epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t s = first; s < end; ++s) part.push_back(static_cast<int32_t>(s));
  rng.shuffle(part);
  out.insert(out.end(), part.begin(), part.end());
}

}  // namespace

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> corpus, const GPTDatasetOptions& options)
    : corpus_(std::move(corpus)), options_(options) {
  DS_CHECK_T(DataError, corpus_ != nullptr, "GPTDataset: no corpus");
  const std::string& prefix = corpus_->prefix();
  if (options_.end_sequence < 0) options_.end_sequence = corpus_->num_sequences();
  DS_CHECK_T(DataError, options_.sequence_length >= 2, prefix, ": sequence_length ", options_.sequence_length,
             " (a sample needs at least 2 input tokens)");
  DS_CHECK_T(DataError,
             options_.first_sequence >= 0 && options_.first_sequence < options_.end_sequence &&
                 options_.end_sequence <= corpus_->num_sequences(),
             prefix, ": the split's sequences [", options_.first_sequence, ", ", options_.end_sequence,
             ") are empty or outside the corpus's ", corpus_->num_sequences());
  int64_t tokens_per_epoch = 0;
  for (int64_t s = options_.first_sequence; s < options_.end_sequence; ++s)
    tokens_per_epoch += corpus_->sequence_length(s);
  DS_CHECK_T(DataError, tokens_per_epoch >= options_.sequence_length + kExtraToken, prefix, ": the split holds ",
             tokens_per_epoch, " tokens, fewer than one sample of ", options_.sequence_length + kExtraToken);
  // Megatron's _get_num_epochs.
  num_epochs_ = 1;
  if (options_.num_samples >= 0) {
    const int64_t wanted = options_.num_samples * options_.sequence_length + kExtraToken;
    for (int64_t tokens = tokens_per_epoch; tokens < wanted; tokens += tokens_per_epoch) ++num_epochs_;
  }
  const std::filesystem::path corpus_path(prefix);
  const std::string dir =
      options_.cache_dir.empty() ? (corpus_path.parent_path() / "cache").string() : options_.cache_dir;
  std::ostringstream name;
  name << corpus_path.filename().string() << ".gpt_seq" << options_.sequence_length << "_samples"
       << options_.num_samples << "_seed" << options_.seed << "_split" << options_.first_sequence << "-"
       << options_.end_sequence << ".ds_index";
  cache_path_ = dir + "/" + name.str();
  if (load(cache_path_)) {
    loaded_from_cache_ = true;
    return;
  }
  std::filesystem::create_directories(dir);
  build(cache_path_, tokens_per_epoch);
  DS_CHECK_T(DataError, load(cache_path_), cache_path_, ": the index just written does not read back");
}

GPTDataset::~GPTDataset() = default;
GPTDataset::GPTDataset(GPTDataset&&) noexcept = default;
GPTDataset& GPTDataset::operator=(GPTDataset&&) noexcept = default;

bool GPTDataset::load(const std::string& path) {
  if (!std::filesystem::exists(path)) return false;
  auto file = checkpoint::MappedFile::open(path);
  Header h{};
  if (file->size() < sizeof(Header)) return false;
  std::memcpy(&h, file->data(), sizeof(Header));
  const bool matches = std::memcmp(h.magic, kIndexMagic, sizeof(kIndexMagic)) == 0 && h.version == 1 &&
                       h.corpus_sequences == corpus_->num_sequences() && h.corpus_tokens == corpus_->num_tokens() &&
                       h.lengths_hash == lengths_hash(*corpus_, options_.first_sequence, options_.end_sequence) &&
                       h.sequence_length == options_.sequence_length && h.requested_samples == options_.num_samples &&
                       h.seed == static_cast<int64_t>(options_.seed) && h.first_sequence == options_.first_sequence &&
                       h.end_sequence == options_.end_sequence && h.num_epochs == num_epochs_ && h.num_samples > 0 &&
                       h.document_index_size > 0 && file->size() == file_size(h);
  // A file that is not this dataset's index (another corpus under the same name, a damaged copy): built again, never
  // read from.
  if (!matches) return false;
  num_samples_ = h.num_samples;
  cache_ = file;
  const char* p = file->data() + sizeof(Header);
  document_index_ = reinterpret_cast<const int32_t*>(p);
  p += padded(4 * static_cast<size_t>(h.document_index_size));
  sample_index_ = reinterpret_cast<const int64_t*>(p);
  shuffle_index_ = sample_index_ + 2 * (num_samples_ + 1);
  return true;
}

void GPTDataset::build(const std::string& path, int64_t tokens_per_epoch) const {
  const int64_t first = options_.first_sequence, end = options_.end_sequence, seq = options_.sequence_length;
  // Megatron separates the final epoch from the shuffle when it contributes under 80% of an epoch's samples.
  bool separate_final_epoch = false;
  int64_t samples_sans_final_epoch = 0;
  if (num_epochs_ > 1) {
    samples_sans_final_epoch = ((num_epochs_ - 1) * tokens_per_epoch - kExtraToken) / seq;
    const int64_t from_final = options_.num_samples - samples_sans_final_epoch;
    const int64_t per_epoch = (tokens_per_epoch - kExtraToken) / seq;
    separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(options_.seed);
  std::vector<int32_t> documents;
  if (separate_final_epoch) {
    append_document_index(documents, first, end, num_epochs_ - 1, rng);
    append_document_index(documents, first, end, 1, rng);
  } else {
    append_document_index(documents, first, end, num_epochs_, rng);
  }
  // helpers.cpp's build_sample_idx: sample boundaries as (position in documents, offset in that sequence).
  const int64_t total = (num_epochs_ * tokens_per_epoch - kExtraToken) / seq;
  std::vector<int64_t> samples(2 * static_cast<size_t>(total + 1), 0);
  int64_t position = 0, offset = 0;
  for (int64_t s = 1; s <= total; ++s) {
    int64_t remaining = seq + kExtraToken;
    while (remaining != 0) {
      const int64_t length = corpus_->sequence_length(documents[static_cast<size_t>(position)]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - kExtraToken;
        remaining = 0;
      } else if (position == static_cast<int64_t>(documents.size()) - 1) {
        offset = corpus_->sequence_length(documents[static_cast<size_t>(position)]) - kExtraToken;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    samples[2 * static_cast<size_t>(s)] = position;
    samples[2 * static_cast<size_t>(s) + 1] = offset;
  }
  // _build_shuffle_index: the windows shuffled, those of a separated final epoch among themselves.
  const int64_t head = separate_final_epoch ? samples_sans_final_epoch : total;
  std::vector<int64_t> order(static_cast<size_t>(head)), tail(static_cast<size_t>(total - head));
  for (int64_t i = 0; i < head; ++i) order[static_cast<size_t>(i)] = i;
  rng.shuffle(order);
  if (total > head) {
    for (int64_t i = head; i < total; ++i) tail[static_cast<size_t>(i - head)] = i;
    rng.shuffle(tail);
    order.insert(order.end(), tail.begin(), tail.end());
  }

  Header h{};
  std::memcpy(h.magic, kIndexMagic, sizeof(kIndexMagic));
  h.version = 1;
  h.corpus_sequences = corpus_->num_sequences();
  h.corpus_tokens = corpus_->num_tokens();
  h.lengths_hash = lengths_hash(*corpus_, first, end);
  h.sequence_length = seq;
  h.requested_samples = options_.num_samples;
  h.seed = static_cast<int64_t>(options_.seed);
  h.first_sequence = first;
  h.end_sequence = end;
  h.num_epochs = num_epochs_;
  h.num_samples = total;
  h.document_index_size = static_cast<int64_t>(documents.size());
  checkpoint::write_file_atomic(path, [&](checkpoint::WritableFile& f) {
    f.append(reinterpret_cast<const char*>(&h), sizeof(h));
    const size_t doc_bytes = 4 * documents.size();
    f.append(reinterpret_cast<const char*>(documents.data()), doc_bytes);
    const char zeros[8] = {};
    f.append(zeros, padded(doc_bytes) - doc_bytes);
    f.append(reinterpret_cast<const char*>(samples.data()), 8 * samples.size());
    f.append(reinterpret_cast<const char*>(order.data()), 8 * order.size());
  });
}

void GPTDataset::read(int64_t i, int64_t* out) const {
  DS_CHECK_T(DataError, i >= 0 && i < num_samples_, corpus_->prefix(), ": sample ", i, " of ", num_samples_);
  const int64_t w = shuffle_index_[i];
  const int64_t begin = sample_index_[2 * w], begin_offset = sample_index_[2 * w + 1];
  const int64_t end = sample_index_[2 * w + 2], end_offset = sample_index_[2 * w + 3];
  int64_t filled = 0;
  for (int64_t d = begin; d <= end; ++d) {
    const int64_t sequence = document_index_[d];
    const int64_t from = d == begin ? begin_offset : 0;
    const int64_t to = d == end ? end_offset + kExtraToken : corpus_->sequence_length(sequence);
    corpus_->read(sequence, from, to - from, out + filled);
    filled += to - from;
  }
  DS_ASSERT(filled == options_.sequence_length + kExtraToken, "sample ", i, " holds ", filled, " tokens");
}

at::Tensor GPTDataset::get(int64_t i) const {
  at::Tensor out = at::empty({options_.sequence_length + kExtraToken}, at::kLong);
  read(i, out.data_ptr<int64_t>());
  return out;
}

}  // namespace deepspeed::data
