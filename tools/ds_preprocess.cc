// ds_preprocess: a JSON-lines corpus tokenized into Megatron indexed datasets (<output-prefix>_text_document.bin
// and .idx), with the flags of Megatron's tools/preprocess_data.py:
//
//   ds_preprocess --input corpus.jsonl --output-prefix data/corpus --tokenizer-model Llama-3.2-1B \
//                 --json-keys text --append-eod --workers 8
//
// --tokenizer-model: a tokenizer.json or the model folder holding one (deepspeed/data/tokenizer.h says which are
// built). --append-eod: the folder's tokenizer_config.json eos_token after each document (or --eod-token). Progress
// goes to stderr; the outputs appear only when every line went through. Exit 1 with one line naming the file and
// line for bad input.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "deepspeed/data/preprocess.h"

int main(int argc, char** argv) {
  deepspeed::data::PreprocessOptions o;
  std::string tokenizer_type = "HuggingFaceTokenizer";
  int log_interval = 100;
  bool split_sentences = false;
  CLI::App app{"Tokenize a JSON-lines corpus into Megatron indexed datasets (.bin/.idx)"};
  app.add_option("--input", o.input, "the .jsonl corpus: one JSON object per line")->required();
  app.add_option("--output-prefix", o.output_prefix, "writes <prefix>_<key>_document.bin/.idx")->required();
  app.add_option("--json-keys", o.json_keys, "the keys whose strings are documents (one dataset per key)");
  app.add_option("--tokenizer-model", o.tokenizer, "tokenizer.json, or the model folder holding it")->required();
  app.add_option("--tokenizer-type", tokenizer_type, "HuggingFaceTokenizer (the type tokenizer.json files are)");
  app.add_flag("--append-eod", o.append_eod, "the end-of-document token after each document");
  app.add_option("--eod-token", o.eod_token, "that token's text (default: tokenizer_config.json's eos_token)");
  app.add_flag("--add-special-tokens", o.add_special_tokens, "the tokenizer's special tokens (a BOS) on each document");
  app.add_option("--workers", o.workers, "tokenizing threads")->check(CLI::Range(1, 1024));
  app.add_flag("--sft", o.sft,
               "fine-tuning pairs: each line's prompt then response, with a loss mask on the response "
               "(<prefix>_sft_document and <prefix>_sft_loss_mask_document)");
  app.add_option("--prompt-key", o.prompt_key, "with --sft: the prompt's key");
  app.add_option("--response-key", o.response_key, "with --sft: the response's key");
  app.add_option("--chat-template", o.chat_template,
                 "with --sft: conversations ({\"messages\": [{\"role\", \"content\"}...]}) rendered by this JSON "
                 "template; the assistant's {% generation %} span trains");
  app.add_option("--messages-key", o.messages_key, "with --chat-template: the conversation's key");
  app.add_option("--log-interval", log_interval, "lines between progress lines")->check(CLI::Range(1, 1 << 30));
  app.add_flag("--split-sentences", split_sentences, "not supported (Megatron splits with NLTK)");
  CLI11_PARSE(app, argc, argv);
  if (split_sentences) {
    std::fputs("ds_preprocess: --split-sentences is not supported (one sequence per document)\n", stderr);
    return 2;
  }
  if (tokenizer_type != "HuggingFaceTokenizer") {
    std::fprintf(stderr, "ds_preprocess: --tokenizer-type %s is not supported (HuggingFaceTokenizer)\n",
                 tokenizer_type.c_str());
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t reported = 0;
  o.progress = [&](int64_t lines, int64_t tokens, int64_t bytes) {
    if (lines - reported < log_interval) return;
    reported = lines;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "ds_preprocess: %lld lines, %lld tokens, %.1f MB/s, %.0f tokens/s\n",
                 static_cast<long long>(lines), static_cast<long long>(tokens), bytes / s / 1e6, tokens / s);
  };
  try {
    const auto stats = deepspeed::data::preprocess_jsonl(o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& prefix : stats.prefixes) std::printf("ds_preprocess: wrote %s.bin/.idx\n", prefix.c_str());
    std::printf("ds_preprocess: %lld documents, %lld tokens in %.2f s (%.0f tokens/s, %d workers)\n",
                static_cast<long long>(stats.documents), static_cast<long long>(stats.tokens), s, stats.tokens / s,
                o.workers);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_preprocess: %s\n", e.what());
    return 1;
  }
}
