// preprocess_jsonl (deepspeed/data/preprocess.h): lines read in batches, each batch tokenized by the workers in
// parallel (each a contiguous share), then written in input order, so the output does not depend on --workers.
#include "deepspeed/data/preprocess.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/chat_template.h"
#include "data/json_file.h"
#include "deepspeed/data/indexed_dataset.h"
#include "deepspeed/data/tokenizer.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

using json = nlohmann::json;

// The end-of-document token's id: `eod_token`, else tokenizer_config.json's eos_token in the tokenizer's folder.
int64_t eod_id(const Tokenizer& tok, const PreprocessOptions& o) {
  std::string token = o.eod_token;
  if (token.empty()) {
    const std::filesystem::path folder = std::filesystem::is_directory(o.tokenizer)
                                             ? std::filesystem::path(o.tokenizer)
                                             : std::filesystem::path(o.tokenizer).parent_path();
    const std::string config = (folder / "tokenizer_config.json").string();
    const json j = read_json_file(config, "missing, and no --eod-token given (--append-eod reads eos_token from it)");
    const json eos = j.value("eos_token", json());
    token = eos.is_string() ? eos.get<std::string>() : eos.is_object() ? eos.value("content", "") : "";
    DS_CHECK_T(DataError, !token.empty(), config, ": no eos_token (give --eod-token)");
  }
  const auto id = tok.token_id(token);
  DS_CHECK_T(DataError, id.has_value(), o.tokenizer, ": the end-of-document token '", token,
             "' is not in the vocabulary");
  return *id;
}

// One line's documents, one per key (with sft: the document and its loss mask).
using Row = std::vector<std::vector<int64_t>>;

// What turns a line into ids: the tokenizer, the end-of-document token, the chat template (null: pairs or text).
struct LineEncoder {
  const Tokenizer& tok;
  std::optional<int64_t> eod;
  const ChatTemplate* chat;
};

// A conversation's document and mask: each chunk of the rendered template tokenized on its own, the first with the
// tokenizer's special tokens when asked.
Row tokenize_conversation(const json& j, const std::string& where, const LineEncoder& e, const PreprocessOptions& o) {
  DS_CHECK_T(DataError, j.contains(o.messages_key), where, ": no \"", o.messages_key, "\" (the conversation)");
  std::vector<int64_t> ids, mask;
  bool first = true;
  for (const ChatChunk& c : e.chat->render(j[o.messages_key], where)) {
    const std::vector<int64_t> part = e.tok.encode(c.text, first && o.add_special_tokens);
    first = false;
    ids.insert(ids.end(), part.begin(), part.end());
    mask.resize(ids.size(), c.trained ? 1 : 0);
  }
  if (e.eod) {
    ids.push_back(*e.eod);
    mask.push_back(1);
  }
  return {std::move(ids), std::move(mask)};
}

// The documents of input line `number` (its text `line`, not blank).
Row tokenize_line(const std::string& line, int64_t number, const LineEncoder& e, const PreprocessOptions& o) {
  const Tokenizer& tok = e.tok;
  const std::optional<int64_t>& eod = e.eod;
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw DataError(o.input + ":" + std::to_string(number) + ": not a JSON object (" + e.what() + ")");
  }
  DS_CHECK_T(DataError, j.is_object(), o.input, ":", number, ": not a JSON object");
  if (e.chat != nullptr) return tokenize_conversation(j, o.input + ":" + std::to_string(number), e, o);
  const std::vector<std::string> keys = o.sft ? std::vector<std::string>{o.prompt_key, o.response_key} : o.json_keys;
  for (const auto& key : keys)
    DS_CHECK_T(DataError, j.contains(key) && j[key].is_string(), o.input, ":", number, ": no string \"", key, "\"");
  if (o.sft) {  // the prompt (mask 0), then the response and the end of the document (mask 1)
    std::vector<int64_t> ids = tok.encode(j[o.prompt_key].get<std::string>(), o.add_special_tokens);
    std::vector<int64_t> mask(ids.size(), 0);
    std::vector<int64_t> response = tok.encode(j[o.response_key].get<std::string>(), false);
    if (eod) response.push_back(*eod);
    ids.insert(ids.end(), response.begin(), response.end());
    mask.resize(ids.size(), 1);
    return {std::move(ids), std::move(mask)};
  }
  Row row;
  for (const auto& key : o.json_keys) {
    std::vector<int64_t> ids = tok.encode(j[key].get<std::string>(), o.add_special_tokens);
    if (eod) ids.push_back(*eod);
    row.push_back(std::move(ids));
  }
  return row;
}

// Up to `count` lines of `in` ("" for a blank one); false at the end of the input.
bool read_lines(std::ifstream& in, size_t count, std::vector<std::string>& lines, PreprocessStats& stats) {
  lines.clear();
  for (std::string line; lines.size() < count;) {
    if (!std::getline(in, line)) return false;
    stats.bytes += static_cast<int64_t>(line.size()) + 1;
    lines.push_back(line.find_first_not_of(" \t\r") == std::string::npos ? std::string() : std::move(line));
  }
  return true;
}

// Every line of `lines` tokenized by `workers` threads, each a contiguous share; the first error (by line) is
// rethrown after all have stopped.
std::vector<Row> tokenize_lines(const std::vector<std::string>& lines, int64_t first_line, const LineEncoder& e,
                                const PreprocessOptions& o) {
  std::vector<Row> rows(lines.size());
  const size_t n = lines.size(), share = (n + static_cast<size_t>(o.workers) - 1) / static_cast<size_t>(o.workers);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(o.workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < o.workers && static_cast<size_t>(w) * share < n; ++w) {
    const size_t a = static_cast<size_t>(w) * share, b = std::min(n, a + share);
    threads.emplace_back([&, a, b, w] {
      try {
        for (size_t i = a; i < b; ++i)
          if (!lines[i].empty()) rows[i] = tokenize_line(lines[i], first_line + static_cast<int64_t>(i), e, o);
      } catch (...) {
        errors[static_cast<size_t>(w)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return rows;
}

}  // namespace

PreprocessStats preprocess_jsonl(const PreprocessOptions& o) {
  DS_CHECK_T(DataError, !o.json_keys.empty(), "--json-keys: give at least one key");
  DS_CHECK_T(DataError, o.workers >= 1, "--workers ", o.workers, ": at least 1");
  const auto tok = Tokenizer::from_file(o.tokenizer);
  const std::optional<int64_t> eod = o.append_eod ? std::optional<int64_t>(eod_id(*tok, o)) : std::nullopt;
  DS_CHECK_T(DataError, o.chat_template.empty() || o.sft,
             "--chat-template: give --sft too (conversations are "
             "fine-tuning data)");
  std::optional<ChatTemplate> chat;
  if (!o.chat_template.empty()) chat = ChatTemplate::from_file(o.chat_template);
  const LineEncoder encoder{*tok, eod, chat ? &*chat : nullptr};
  std::ifstream in(o.input, std::ios::binary);
  DS_CHECK_T(DataError, in.good(), o.input, ": cannot open");
  PreprocessStats stats;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> out;
  const std::vector<std::string> names = o.sft ? std::vector<std::string>{"sft", "sft_loss_mask"} : o.json_keys;
  for (size_t k = 0; k < names.size(); ++k) {
    stats.prefixes.push_back(o.output_prefix + "_" + names[k] + "_document");
    const bool mask = o.sft && k == 1;
    out.push_back(std::make_unique<IndexedDatasetBuilder>(
        stats.prefixes.back(), mask ? TokenType::kUInt8 : token_type_for_vocab(tok->vocab_size())));
  }
  int64_t line_number = 0;
  std::vector<std::string> lines;
  for (bool more = true; more;) {
    more = read_lines(in, static_cast<size_t>(o.workers) * 256, lines, stats);
    const std::vector<Row> rows = tokenize_lines(lines, line_number + 1, encoder, o);
    line_number += static_cast<int64_t>(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;  // a blank line carries no document
      for (size_t k = 0; k < out.size(); ++k) {
        out[k]->add_document(rows[i][k]);
        if (!o.sft || k == 0) stats.tokens += static_cast<int64_t>(rows[i][k].size());
      }
      ++stats.documents;
    }
    if (o.progress) o.progress(line_number, stats.tokens, stats.bytes);
  }
  DS_CHECK_T(DataError, stats.documents > 0, o.input, ": no documents (an empty file?)");
  for (auto& b : out) b->finish();
  return stats;
}

}  // namespace deepspeed::data
