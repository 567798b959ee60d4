// Tokenized corpora in the indexed-dataset format of Megatron-LM / megatron-core and DeepSpeed
// (`PREFIX.bin` + `PREFIX.idx`, the "MMIDIDX" index), the format their preprocessing tools write and their GPT
// datasets read:
//
//   PREFIX.bin  the token ids of every sequence, back to back, in one integer type
//   PREFIX.idx  "MMIDIDX\0\0", version (u64, 1), dtype code (u8), sequence count n (u64), document-index count
//               d + 1 (u64), then int32 lengths[n] (tokens per sequence), int64 pointers[n] (byte offset of each
//               sequence in .bin), int64 document_indices[d + 1] (document k is sequences
//               [document_indices[k], document_indices[k + 1]); the first is 0, the last n). Little-endian.
//
// A document is usually one sequence (a whole text, as `ds_preprocess` and Megatron's preprocess_data.py write
// without sentence splitting). Both files are memory-mapped: opening a 100 GB corpus reads its index's pages once to
// check them and gives them back, and the pages sequences are copied from are given back every 8 MB read, so the
// resident memory of iterating a corpus stays below 8 MB plus what the kernel maps around the last reads. A multimodal
// index (its per-sequence modes after the document indices) is refused by name.
//
//   deepspeed::data::IndexedDataset corpus("data/my-corpus_text_document");
//   at::Tensor tokens = corpus.get(7);                 // int64, the 8th sequence
//
//   deepspeed::data::IndexedDatasetBuilder out("out/corpus_text_document", deepspeed::data::TokenType::kUInt16);
//   out.add_document(ids);                             // one sequence, then the document ends
//   out.finish();                                      // .bin and .idx appear together (written, synced, renamed)
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace deepspeed::checkpoint {
class MappedFile;
}

namespace deepspeed::data {

// The .idx dtype codes (megatron-core's DType): the integer types a token id may be stored in. The float codes (6:
// float64, 7: float32) exist in the format but hold no token ids; a corpus using them is refused.
enum class TokenType : uint8_t { kUInt8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kUInt16 = 8 };

// Bytes per token of `type`, and its name ("uint16", ...).
size_t token_bytes(TokenType type);
const char* token_type_name(TokenType type);
// The smallest type Megatron's preprocessing picks for a vocabulary: uint16 below 65500 ids, else int32.
TokenType token_type_for_vocab(int64_t vocab_size);

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and checks the index whole before anything is read: the header (magic, version,
  // a known integer dtype), the counts against the index's size, every length non-negative and every sequence inside
  // .bin, the document indices rising from 0 to the sequence count, and at least one token. DataError naming the
  // file and the entry otherwise.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;

  const std::string& prefix() const { return prefix_; }
  TokenType token_type() const { return type_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_documents_; }
  int64_t num_tokens() const { return num_tokens_; }
  // Tokens in sequence `i` (0 <= i < num_sequences(), unchecked).
  int64_t sequence_length(int64_t i) const;
  // The first sequence of document `k` (0 <= k <= num_documents(), unchecked; k = num_documents() gives the count).
  int64_t document_index(int64_t k) const;

  // `length` tokens of sequence `i` from `offset` (-1: to its end), widened to int64 into `out`, which must hold
  // them (safe from several threads). DataError when the range is not inside the sequence.
  void read(int64_t i, int64_t offset, int64_t length, int64_t* out) const;
  // The same as a new int64 tensor.
  at::Tensor get(int64_t i, int64_t offset = 0, int64_t length = -1) const;

 private:
  std::string prefix_;
  TokenType type_ = TokenType::kUInt16;
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_documents_ = 0;
  // The index stays mapped (its arrays are 12 bytes per sequence: 600 MB for 50M documents) and is read with
  // memcpy: its int32 and int64 arrays start at odd offsets.
  std::shared_ptr<const checkpoint::MappedFile> idx_;
  std::shared_ptr<const checkpoint::MappedFile> bin_;
  size_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;  // byte offsets of the arrays in the index
  // Bytes read since the .bin's pages were last given back (shared by the threads that read one dataset).
  static constexpr int64_t kDropEveryBytes = 8 << 20;
  std::unique_ptr<std::atomic<int64_t>> read_since_drop_ = std::make_unique<std::atomic<int64_t>>(0);
};

// Writes PREFIX.bin and PREFIX.idx as megatron-core's IndexedDatasetBuilder does (its add_item / end_document). The
// tokens stream to a temporary file beside PREFIX.bin; finish() syncs and renames it, then writes the index
// atomically, so a killed run leaves no half-written dataset under PREFIX (only a temporary file).
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, TokenType type);
  ~IndexedDatasetBuilder();  // without finish(): the temporary file is removed
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence of the current document. DataError naming the token when an id does not fit the type.
  void add_sequence(std::span<const int64_t> tokens);
  // Ends the current document (after its sequences).
  void end_document();
  // One sequence that is a whole document.
  void add_document(std::span<const int64_t> tokens) {
    add_sequence(tokens);
    end_document();
  }
  // Ends an open document, writes the index and makes both files appear. DataError when nothing was added.
  void finish();
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }

 private:
  std::string prefix_;
  std::string bin_temp_;
  TokenType type_;
  std::FILE* bin_ = nullptr;
  int64_t bytes_ = 0;
  std::vector<char> buffer_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  bool finished_ = false;
};

}  // namespace deepspeed::data
