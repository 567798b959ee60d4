// A chat template for fine-tuning on conversations (ds_preprocess --sft --chat-template FILE): how each message's
// role wraps its content, and which part of an assistant's turn trains. A JSON file:
//
//   {"system":    "<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
//    "user":      "<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
//    "assistant": "<|start_header_id|>assistant<|end_header_id|>\n\n{% generation %}{content}<|eot_id|>{% endgeneration
//    %}", "default_system": "You are a helpful assistant."}
//
// "{content}" stands for the message's text; in "assistant", the span between "{% generation %}" and
// "{% endgeneration %}" is what the loss counts, the markers transformers' chat templates use for
// return_assistant_tokens_mask. "default_system" (optional) opens a conversation that has no system message.
//
// Rendering gives the conversation as chunks alternately not trained and trained; ds_preprocess tokenizes each chunk
// on its own (as LLaMA-Factory's templates do), so a token never straddles the mask's edge. Where a chunk boundary
// falls inside what the pre-tokenizer would keep as one piece (an assistant message starting with a newline right
// after a header that ends in one), the ids differ from tokenizing the whole rendered text at that spot.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::data {

struct ChatChunk {
  std::string text;
  bool trained = false;
};

class ChatTemplate {
 public:
  // DataError naming the file and key for a file that is not such an object: an unknown key, a format without
  // "{content}" (or with it twice), an assistant format without the generation markers, markers elsewhere.
  static ChatTemplate from_file(const std::string& path);

  // `messages`: [{"role": "system" | "user" | "assistant", "content": "..."}, ...]; DataError naming `where` (the
  // input's file:line) for a message of another shape or role, or a conversation with no assistant message.
  std::vector<ChatChunk> render(const nlohmann::json& messages, const std::string& where) const;

 private:
  struct Format {
    std::string before, after;                  // around {content}; for the assistant, the untrained parts
    std::string trained_before, trained_after;  // the assistant's trained text around {content}
  };
  std::optional<Format> system_, user_, assistant_;
  std::optional<std::string> default_system_;
  std::string path_;
};

}  // namespace deepspeed::data
