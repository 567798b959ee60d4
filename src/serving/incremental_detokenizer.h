// Generated tokens to text one token at a time, for streaming: each piece holds whole characters only. A character
// whose UTF-8 bytes are split over several tokens (byte-level BPE spells rare characters byte by byte) comes out
// once its last byte has arrived, never as U+FFFD halves, and the pieces add up to Tokenizer::decode of all the
// tokens (special tokens skipped).
//
// How: vLLM's detokenize_incrementally. Each push decodes a short window of the newest tokens twice, with and
// without the new ones, and releases the difference unless it ends in U+FFFD (a character still incomplete).
// Decoding a window rather than one token keeps the decoders right that treat a token by its neighbours
// (SentencePiece drops the leading space of the first piece of a decode).
//
// One request's state: use from one thread at a time. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepspeed/data/tokenizer.h"

namespace deepspeed::serving {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const data::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // The text `token` completes (possibly empty).
  std::string push(int64_t token);
  // The rest at the end of generation: held bytes of an unfinished character come out as U+FFFD, as decode writes.
  std::string flush();

 private:
  std::string decode(size_t from, size_t to) const;

  const data::Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;
  size_t prefix_offset_ = 0;  // the window's start: tokens already released, decoded again for context
  size_t read_offset_ = 0;    // tokens before this are released
};

}  // namespace deepspeed::serving
