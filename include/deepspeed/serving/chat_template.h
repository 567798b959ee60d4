// A model's chat template: the Jinja2 program in its Hugging Face folder that turns a conversation (OpenAI-style
// messages) into the prompt text, rendered as transformers' `tokenizer.apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...)` renders it (jinja2's sandbox with trim_blocks and lstrip_blocks,
// transformers' `tojson`, `raise_exception` and `strftime_now`), byte for byte. /v1/chat/completions builds its
// prompt with it.
//
// The renderer covers what real chat templates use (text, {{ }}, {% %}, {# #}, whitespace control, if/for/set/
// macro, namespace(), Python-style expressions, the common filters, tests and string methods). A template using
// anything else is refused when it is loaded, in one line naming the construct and the template's file, never
// rendered with the construct dropped.
//
// Thread contract: a ChatTemplate is immutable once built; render() may be called from many threads at once.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "deepspeed/error.h"

namespace deepspeed::serving {

// A conversation the template refuses (its raise_exception, e.g. roles that do not alternate) or cannot render
// (a message of the wrong shape: a number where the template adds strings). Thrown by render(); the message is one
// line, the template's own words where it raised them: a client's request error, not a server fault.
class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

class ChatTemplate {
 public:
  // The template of a Hugging Face model folder, found as transformers finds it: `<dir>/chat_template.jinja` when
  // present, else tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} of which
  // "default" is used). The special tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
  // mask_token; strings or AddedToken objects) come from tokenizer_config.json, as apply_chat_template passes them.
  // Throws DataError naming the file: no tokenizer_config.json, not JSON, "<dir>/tokenizer_config.json has no
  // chat_template", a template of syntax the renderer refuses (with its line and column) or does not support.
  static ChatTemplate from_model_dir(const std::string& dir);

  // A template from its text; `source_name` (a file name) opens every error. `variables`: values every render sees
  // as strings (the special tokens: {"bos_token", "<s>"}, ...). Throws DataError as from_model_dir does.
  static ChatTemplate from_string(const std::string& source, const std::string& source_name,
                                  const std::map<std::string, std::string>& variables = {});

  // The prompt for `messages_json` (a JSON array of message objects, as /v1/chat/completions receives it), with
  // the assistant's opening when `add_generation_prompt`. `extra_json`: a JSON object of further template
  // variables (tools, documents, enable_thinking, date_string, ...), overriding the special tokens, as
  // apply_chat_template's keyword arguments do; `tools` and `documents` are none unless given.
  // Throws ChatTemplateError (see above), also when `messages_json` or `extra_json` is not JSON of that shape.
  std::string render(const std::string& messages_json, bool add_generation_prompt,
                     const std::string& extra_json = "{}") const;

  // The template's origin, as errors name it (e.g. "/models/llama/tokenizer_config.json").
  const std::string& source_name() const;

  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace deepspeed::serving
