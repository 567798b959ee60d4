// Tokenizing a JSON-lines corpus into indexed datasets: what Megatron's tools/preprocess_data.py does, and what the
// ds_preprocess tool runs.
//
//   deepspeed::data::PreprocessOptions o;
//   o.input = "corpus.jsonl";               // one JSON object per line: {"text": "..."}
//   o.output_prefix = "data/corpus";        // writes data/corpus_text_document.bin/.idx
//   o.tokenizer = "Llama-3.2-1B";           // a folder or its tokenizer.json
//   o.append_eod = true;
//   deepspeed::data::preprocess_jsonl(o);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace deepspeed::data {

struct PreprocessOptions {
  std::string input;          // a .jsonl file
  std::string output_prefix;  // each key K writes <output_prefix>_<K>_document.bin/.idx, as Megatron names them
  std::vector<std::string> json_keys = {"text"};
  std::string tokenizer;            // tokenizer.json or the folder holding it (deepspeed/data/tokenizer.h)
  bool append_eod = false;          // the end-of-document token after each document
  std::string eod_token;            // its text; "": the folder's tokenizer_config.json eos_token
  bool add_special_tokens = false;  // the tokenizer's post-processor tokens (a BOS) on each document
  int workers = 1;                  // tokenizing threads
  // Fine-tuning data: each line {"<prompt_key>": "...", "<response_key>": "..."} becomes one document, the prompt's
  // ids (with the tokenizer's special tokens when add_special_tokens) then the response's (and the end-of-document
  // token), written to <output_prefix>_sft_document with a loss mask beside it, <output_prefix>_sft_loss_mask_document
  // (uint8, 1 on the response's tokens and the end-of-document token: the tokens the loss counts). json_keys is unused.
  bool sft = false;
  std::string prompt_key = "prompt";
  std::string response_key = "response";
  // Conversations instead of pairs: with sft, each line {"<messages_key>": [{"role": ..., "content": ...}, ...]}
  // rendered by this chat template file (src/data/chat_template.h has its format: each role's wrapping, and the
  // assistant turn's trained span between {% generation %} and {% endgeneration %}, as transformers marks it); the
  // mask is 1 on the trained spans (and the end-of-document token). The tokenizer's special tokens (a BOS), with
  // add_special_tokens, open the conversation.
  std::string chat_template;
  std::string messages_key = "messages";
  // Called now and then with the lines done, the tokens written and the input bytes read (a progress bar).
  std::function<void(int64_t lines, int64_t tokens, int64_t bytes)> progress;
};

struct PreprocessStats {
  int64_t documents = 0;              // per key
  int64_t tokens = 0;                 // all keys
  int64_t bytes = 0;                  // input read
  std::vector<std::string> prefixes;  // one per key, in json_keys' order
};

// Tokenizes every line of the input. DataError naming the file and line for a line that is not a JSON object or lacks
// a key (or whose value is not a string), and naming the tokenizer for one it cannot load; then nothing is written
// (the outputs appear only when every line went through).
PreprocessStats preprocess_jsonl(const PreprocessOptions& options);

}  // namespace deepspeed::data
