// The byte-level BPE tokenizer of a Hugging Face tokenizer.json (deepspeed/data/tokenizer.h), step for step as
// `tokenizers` runs it: added tokens split out of the raw text (leftmost, longest), each other segment through the
// normalizer (Unicode normal forms), the pre-tokenizers (regex splits, the ByteLevel byte-to-character map), each piece
// through the BPE merges by rank, and the post-processor's special tokens around the result. Decoding runs the other
// way: ids to token strings, the ByteLevel decoder's characters back to bytes, and those bytes read as UTF-8 the way
// Rust's String::from_utf8_lossy reads them.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "data/json_file.h"
#include "data/regex.h"
#include "data/tokenizers.h"
#include "data/unicode_normalizer.h"
#include "deepspeed/data/tokenizer.h"
#include "deepspeed/error.h"
#include "deepspeed/utf8.h"

namespace deepspeed::data {

namespace {

using json = nlohmann::json;

// GPT-2's pattern, which ByteLevel(use_regex=true) splits with.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256, 257, ... in byte order; each
// as its UTF-8 text.
std::array<std::string, 256> byte_level_alphabet() {
  std::array<std::string, 256> out;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    append_utf8(out[b], printable ? b : next++);
  }
  return out;
}

// The inverse of byte_level_alphabet, indexed by code point: the byte a character stands for, -1 for a character
// that stands for none. Every alphabet character is below U+0800, so two UTF-8 bytes at most.
std::array<int16_t, 0x800> byte_level_inverse() {
  std::array<int16_t, 0x800> out;
  out.fill(-1);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[printable ? b : next++] = static_cast<int16_t>(b);
  }
  return out;
}

// How many bytes of `s` from `i` on make one well-formed UTF-8 character (Unicode's table 3-7), 0 if the byte at `i`
// cannot start one. A shorter prefix that could still be completed counts as far as it goes, negated, so the caller
// replaces that maximal subpart with one U+FFFD as from_utf8_lossy does.
int utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned char b = byte(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
  }
  return n;
}

// `bytes` as UTF-8 text, each maximal ill-formed subpart replaced by U+FFFD (String::from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int n = utf8_sequence_length(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += n == 0 ? 1 : -n;
    }
  }
  return out;
}

// The UTF-8 characters of `s`, each as its own string.
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

struct PreTokenizer {
  std::unique_ptr<Regex> regex;  // Split, or ByteLevel with use_regex
  bool remove_matches = false;   // Split's behaviour "Removed" (else "Isolated")
  bool byte_level = false;
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  int64_t id;
  bool special;
};

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const json& j, const std::string& path);
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int64_t> token_id(const std::string& token) const override {
    const auto it = vocab_.find(token);
    if (it != vocab_.end()) return it->second;
    for (const auto& a : added_)
      if (a.content == token) return a.id;
    return std::nullopt;
  }

 private:
  void read_pre_tokenizer(const json& p, const std::string& where);
  void read_post_processor(const json& p, const std::string& where);
  void read_decoder(const json& d);
  std::string byte_level_decode(const std::vector<std::string_view>& tokens) const;
  void encode_segment(std::string_view segment, std::vector<int64_t>& out) const;
  void encode_piece(const std::string& piece, std::vector<int64_t>& out) const;

  std::string path_;
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<AddedToken> added_;                        // longest first
  // added_'s entries by their first byte (longest first), so the scan of a text tries only the tokens that can
  // start at each position (Llama 3 has 256 special tokens).
  std::array<std::vector<const AddedToken*>, 256> added_by_first_byte_;
  std::unique_ptr<UnicodeNormalizer> normalizer_;  // null: none
  std::vector<PreTokenizer> pre_;
  std::vector<int64_t> prefix_, suffix_;  // TemplateProcessing's single template around $A
  std::optional<int64_t> unk_;
  bool ignore_merges_ = false;
  int64_t vocab_size_ = 0;
  std::array<std::string, 256> bytes_ = byte_level_alphabet();
  // Decoding: each id's token string (none where no token has the id), the special added tokens'
  // contents (`tokenizers` drops tokens by their string), and the decoder: how many ByteLevel steps, or why none runs.
  std::vector<std::optional<std::string>> token_of_id_;
  std::unordered_set<std::string> special_;
  std::array<int16_t, 0x800> byte_of_char_ = byte_level_inverse();
  int byte_level_decoders_ = 0;
  bool join_with_spaces_ = true;  // no decoder at all (an empty Sequence joins without them)
  std::string decoder_refusal_;   // non-empty: decode throws it
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // piece -> ids
};

// `j[key]` must be absent, null or `allowed`; else DataError naming the key and value.
void expect_default(const json& j, const char* key, const json& allowed, const std::string& where) {
  if (!j.contains(key) || j[key].is_null() || j[key] == allowed) return;
  throw DataError(where + ": " + key + " = " + j[key].dump() + " is not supported (only " + allowed.dump() + ")");
}

BpeTokenizer::BpeTokenizer(const json& j, const std::string& path) : path_(path) {
  const json& model = j.at("model");
  const std::string type = model.value("type", "");
  DS_CHECK_T(DataError, type == "BPE", path, ": model.type \"", type,
             "\" is not supported (only byte-level BPE tokenizer.json files are; a SentencePiece model comes as "
             "tokenizer.model)");
  expect_default(model, "dropout", json(0.0), path + ": model");
  expect_default(model, "byte_fallback", json(false), path + ": model");
  expect_default(model, "continuing_subword_prefix", json(""), path + ": model");
  expect_default(model, "end_of_word_suffix", json(""), path + ": model");
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    normalizer_ = std::make_unique<UnicodeNormalizer>(j["normalizer"], path + ": normalizer");
  ignore_merges_ = model.value("ignore_merges", false);
  for (const auto& [token, id] : model.at("vocab").items()) {
    vocab_[token] = id.get<int64_t>();
    vocab_size_ = std::max(vocab_size_, id.get<int64_t>() + 1);
  }
  int32_t rank = 0;
  for (const auto& m : model.at("merges")) {
    std::string key;
    if (m.is_string()) {
      key = m.get<std::string>();  // the older "left right" form
    } else {
      DS_CHECK_T(DataError, m.is_array() && m.size() == 2, path, ": merge ", rank, " is not a pair: ", m.dump());
      key = m[0].get<std::string>() + " " + m[1].get<std::string>();
    }
    merge_rank_.emplace(key, rank++);
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto it = vocab_.find(model["unk_token"].get<std::string>());
    if (it != vocab_.end()) unk_ = it->second;
  }
  for (const auto& a : j.value("added_tokens", json::array())) {
    const std::string where = path + ": added token " + a.value("content", "?");
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) expect_default(a, flag, json(false), where);
    added_.push_back({a.at("content").get<std::string>(), a.at("id").get<int64_t>(),
                      a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>()});
    vocab_size_ = std::max(vocab_size_, added_.back().id + 1);
    if (added_.back().special) special_.insert(added_.back().content);
  }
  // Added tokens win over the model's own for an id, as in `tokenizers`' id_to_token.
  token_of_id_.resize(static_cast<size_t>(vocab_size_));
  for (const auto& [token, id] : vocab_)
    if (id >= 0) token_of_id_[static_cast<size_t>(id)] = token;
  for (const auto& a : added_)
    if (a.id >= 0) token_of_id_[static_cast<size_t>(a.id)] = a.content;
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const auto& a : added_)
    if (!a.content.empty()) added_by_first_byte_[static_cast<unsigned char>(a.content[0])].push_back(&a);
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    read_pre_tokenizer(j["pre_tokenizer"], path + ": pre_tokenizer");
  if (j.contains("post_processor") && !j["post_processor"].is_null())
    read_post_processor(j["post_processor"], path + ": post_processor");
  if (j.contains("decoder") && !j["decoder"].is_null()) read_decoder(j["decoder"]);
}

// An unsupported decoder fails decode, not the load: encode needs no decoder, and files that encode today
// (ds_preprocess's) must keep loading.
void BpeTokenizer::read_decoder(const json& d) {
  join_with_spaces_ = false;
  const bool typed = d.is_object() && d.contains("type") && d["type"].is_string();
  const std::string type = typed ? d["type"].get<std::string>() : "";
  if (type == "ByteLevel") {
    ++byte_level_decoders_;  // its options only move offsets
  } else if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& step : d["decoders"]) read_decoder(step);
  } else if (decoder_refusal_.empty()) {
    decoder_refusal_ = path_ + ": decoder type \"" + type +
                       "\" is not supported, so decode cannot run (ByteLevel, a Sequence of ByteLevel, or no decoder)";
  }
}

void BpeTokenizer::read_pre_tokenizer(const json& p, const std::string& where) {
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : p.at("pretokenizers")) read_pre_tokenizer(step, where);
    return;
  }
  PreTokenizer step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) step.regex = std::make_unique<Regex>(kGpt2Pattern, where + " (ByteLevel)");
  } else if (type == "Split") {
    const json& pattern = p.at("pattern");
    const std::string behavior = p.value("behavior", "");
    DS_CHECK_T(DataError, behavior == "Isolated" || behavior == "Removed", where, ": Split behavior \"", behavior,
               "\" is not supported (Isolated, Removed)");
    DS_CHECK_T(DataError, !p.value("invert", false), where, ": Split with invert = true is not supported");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else {  // a literal string: quoted for PCRE2
      regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
    }
    step.regex = std::make_unique<Regex>(regex, where + " (Split)");
    step.remove_matches = behavior == "Removed";
  } else {
    throw DataError(where + ": type \"" + type + "\" is not supported (ByteLevel, Split, Sequence)");
  }
  pre_.push_back(std::move(step));
}

void BpeTokenizer::read_post_processor(const json& p, const std::string& where) {
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : p.at("processors")) read_post_processor(step, where);
  } else if (type == "TemplateProcessing") {
    bool after = false;
    for (const auto& item : p.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      for (const auto& id : p.at("special_tokens").at(name).at("ids")) (after ? suffix_ : prefix_).push_back(id);
    }
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets: nothing for the ids
    throw DataError(where + ": type \"" + type + "\" is not supported (TemplateProcessing, ByteLevel, Sequence)");
  }
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> out;
  if (add_special_tokens) out = prefix_;
  // Added tokens first: at each position the longest one that starts there; the text between goes to the model.
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* a : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, a->content.size(), a->content) == 0) {
        hit = a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > start) encode_segment(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) encode_segment(text.substr(start), out);
  if (add_special_tokens) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  DS_CHECK_T(DataError, decoder_refusal_.empty(), decoder_refusal_);
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    DS_CHECK_T(DataError, id >= 0 && id < vocab_size_, path_, ": cannot decode token id ", id,
               ", the vocabulary size is ", vocab_size_);
    const auto& token = token_of_id_[static_cast<size_t>(id)];
    if (!token) continue;  // an id between the vocabulary's ids: `tokenizers` skips it too
    if (skip_special_tokens && special_.count(*token) != 0) continue;
    tokens.push_back(*token);
  }
  if (byte_level_decoders_ == 0) {  // no decoder: `tokenizers` joins the token strings with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out.append(i > 0 && join_with_spaces_ ? " " : "").append(tokens[i]);
    return out;
  }
  std::string text = byte_level_decode(tokens);
  for (int i = 1; i < byte_level_decoders_; ++i) text = byte_level_decode({text});
  return text;
}

// The ByteLevel decoder: a token whose characters are all in the byte-level alphabet becomes their bytes, any other
// (an added token such as "a b") its own UTF-8; then all of it is read as UTF-8 at once, so a character split
// across tokens joins up and only what stays broken becomes U+FFFD.
std::string BpeTokenizer::byte_level_decode(const std::vector<std::string_view>& tokens) const {
  std::string bytes, mapped;
  for (const std::string_view token : tokens) {
    mapped.clear();
    bool all_mapped = true;
    for (size_t i = 0; i < token.size() && all_mapped;) {
      const auto c = static_cast<unsigned char>(token[i]);
      uint32_t cp = 0x800;  // stands for "not in the alphabet"
      size_t n = 1;
      if (c < 0x80) {
        cp = c;
      } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
        cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
        n = 2;
      }
      all_mapped = cp < byte_of_char_.size() && byte_of_char_[cp] >= 0;
      if (all_mapped) mapped += static_cast<char>(byte_of_char_[cp]);
      i += n;
    }
    bytes.append(all_mapped ? std::string_view(mapped) : token);
  }
  return utf8_lossy(bytes);
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<int64_t>& out) const {
  // The normalizer sees each segment between added tokens, as `tokenizers` applies it (added tokens are matched on
  // the raw text: those marked "normalized" whose normal form differs from their text would match differently).
  std::vector<std::string> pieces{normalizer_ ? normalizer_->apply(segment) : std::string(segment)};
  for (const auto& step : pre_) {
    std::vector<std::string> next;
    for (auto& piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
      if (step.regex) {
        size_t at = 0;
        for (const auto& [b, e] : step.regex->find_all(piece)) {
          if (b > at) next.push_back(piece.substr(at, b - at));
          if (!step.remove_matches) next.push_back(piece.substr(b, e - b));
          at = e;
        }
        if (at < piece.size()) next.push_back(piece.substr(at));
      } else {
        next.push_back(std::move(piece));
      }
    }
    if (step.byte_level)
      for (auto& piece : next) {
        std::string mapped;
        for (const char c : piece) mapped += bytes_[static_cast<unsigned char>(c)];
        piece = std::move(mapped);
      }
    pieces = std::move(next);
  }
  for (const auto& piece : pieces)
    if (!piece.empty()) encode_piece(piece, out);
}

void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    const auto whole = vocab_.find(piece);
    if (whole != vocab_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto hit = cache_.find(piece);
    if (hit != cache_.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  // The lowest-ranked adjacent pair merges first (the leftmost among equals), until no pair has a merge.
  std::vector<std::string> symbols = characters(piece);
  while (symbols.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merge_rank_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    symbols[at] += symbols[at + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int64_t> ids;
  for (const auto& s : symbols) {
    const auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
    } else {
      DS_CHECK_T(DataError, unk_.has_value(), path_, ": the piece '", detail::printable(s),
                 "' is not in the vocabulary and the model has no unk_token");
      ids.push_back(*unk_);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < (1u << 20)) cache_.emplace(piece, std::move(ids));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& file) {
  const json j = read_json_file(file);
  try {
    return std::make_unique<BpeTokenizer>(j, file);
  } catch (const json::exception& e) {
    throw DataError(file + ": " + e.what());
  }
}

}  // namespace deepspeed::data
