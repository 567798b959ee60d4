// preprocess_jsonl (deepspeed/data/preprocess.h): lines read in batches, each batch tokenized by the workers in
// parallel (each a contiguous share), then written in input order, so the output does not depend on --workers.
#include "deepspeed/data/preprocess.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

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
    std::ifstream in(config);
    DS_CHECK_T(DataError, in.good(), "--append-eod: no --eod-token given and no ", config, " to read eos_token from");
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw DataError(config + ": not JSON (" + e.what() + ")");
    }
    const json eos = j.value("eos_token", json());
    token = eos.is_string() ? eos.get<std::string>() : eos.is_object() ? eos.value("content", "") : "";
    DS_CHECK_T(DataError, !token.empty(), config, ": no eos_token (give --eod-token)");
  }
  const auto id = tok.token_id(token);
  DS_CHECK_T(DataError, id.has_value(), o.tokenizer, ": the end-of-document token '", token,
             "' is not in the vocabulary");
  return *id;
}

// One line's documents, one per key.
struct Row {
  std::vector<std::vector<int64_t>> ids;
};

}  // namespace

PreprocessStats preprocess_jsonl(const PreprocessOptions& o) {
  DS_CHECK_T(DataError, !o.json_keys.empty(), "--json-keys: give at least one key");
  DS_CHECK_T(DataError, o.workers >= 1, "--workers ", o.workers, ": at least 1");
  const auto tok = Tokenizer::from_file(o.tokenizer);
  const std::optional<int64_t> eod = o.append_eod ? std::optional<int64_t>(eod_id(*tok, o)) : std::nullopt;
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
  const size_t batch = static_cast<size_t>(o.workers) * 256;
  int64_t line_number = 0;
  std::vector<std::string> lines;
  std::vector<Row> rows;
  auto tokenize = [&](size_t first, size_t end, int64_t first_line) {
    for (size_t i = first; i < end; ++i) {
      const int64_t number = first_line + static_cast<int64_t>(i);
      json j;
      try {
        j = json::parse(lines[i]);
      } catch (const json::exception& e) {
        throw DataError(o.input + ":" + std::to_string(number) + ": not a JSON object (" + e.what() + ")");
      }
      DS_CHECK_T(DataError, j.is_object(), o.input, ":", number, ": not a JSON object");
      rows[i].ids.clear();
      if (o.sft) {
        for (const auto& key : {o.prompt_key, o.response_key})
          DS_CHECK_T(DataError, j.contains(key) && j[key].is_string(), o.input, ":", number, ": no string \"", key,
                     "\"");
        std::vector<int64_t> ids = tok->encode(j[o.prompt_key].get<std::string>(), o.add_special_tokens);
        std::vector<int64_t> mask(ids.size(), 0);
        for (const int64_t id : tok->encode(j[o.response_key].get<std::string>(), false)) {
          ids.push_back(id);
          mask.push_back(1);
        }
        if (eod) {
          ids.push_back(*eod);
          mask.push_back(1);
        }
        rows[i].ids = {std::move(ids), std::move(mask)};
        continue;
      }
      for (const auto& key : o.json_keys) {
        DS_CHECK_T(DataError, j.contains(key) && j[key].is_string(), o.input, ":", number, ": no string \"", key, "\"");
        std::vector<int64_t> ids = tok->encode(j[key].get<std::string>(), o.add_special_tokens);
        if (eod) ids.push_back(*eod);
        rows[i].ids.push_back(std::move(ids));
      }
    }
  };
  for (bool more = true; more;) {
    lines.clear();
    const int64_t first_line = line_number + 1;
    for (std::string line; lines.size() < batch;) {
      if (!std::getline(in, line)) {
        more = false;
        break;
      }
      ++line_number;
      stats.bytes += static_cast<int64_t>(line.size()) + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) {  // blank lines carry no document
        lines.emplace_back();
        continue;
      }
      lines.push_back(std::move(line));
    }
    rows.assign(lines.size(), Row{});
    // Each worker a contiguous share; the first error (by line) is rethrown after all have stopped.
    const size_t n = lines.size(), share = (n + static_cast<size_t>(o.workers) - 1) / static_cast<size_t>(o.workers);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(o.workers));
    std::vector<std::thread> threads;
    for (int w = 0; w < o.workers && static_cast<size_t>(w) * share < n; ++w) {
      const size_t a = static_cast<size_t>(w) * share, b = std::min(n, a + share);
      threads.emplace_back([&, a, b, w] {
        try {
          // Blank lines are skipped inside: they have no JSON.
          for (size_t i = a; i < b; ++i)
            if (!lines[i].empty()) tokenize(i, i + 1, first_line);
        } catch (...) {
          errors[static_cast<size_t>(w)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t i = 0; i < n; ++i) {
      if (lines[i].empty()) continue;
      for (size_t k = 0; k < out.size(); ++k) {
        out[k]->add_document(rows[i].ids[k]);
        if (!o.sft || k == 0) stats.tokens += static_cast<int64_t>(rows[i].ids[k].size());
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
