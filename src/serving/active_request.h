// One submitted request as its HTTP handler sees it: the engine's token events turned into text (whole characters,
// stop strings applied), the finish reason and the token counts. Destroying it before the engine ended the request
// (the client went away, an exception, a stop string) cancels it, so its KV blocks always go back.
//
// Owned and used by one handler thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serving/engine_loop.h"
#include "serving/incremental_detokenizer.h"
#include "serving/openai_request.h"
#include "serving/openai_response.h"
#include "serving/stop_strings.h"

namespace deepspeed::serving {

class ActiveRequest {
 public:
  ActiveRequest(EngineLoop& loop, std::shared_ptr<RequestStream> stream, const data::Tokenizer& tokenizer,
                const CompletionRequest& request, ResponseHead head, int64_t prompt_tokens);
  ~ActiveRequest();
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;

  // Waits up to `wait` for tokens and appends the text they release to *text (everything already queued is taken
  // at once). False when nothing arrived in time. RequestError (503) when the server cancelled the request
  // (shutting down, or the engine failed).
  bool next(std::string* text, std::chrono::milliseconds wait);
  bool done() const { return !finish_reason_.empty(); }
  const std::string& finish_reason() const { return finish_reason_; }  // "stop" or "length" once done
  Usage usage() const { return {prompt_tokens_, completion_tokens_}; }
  const ResponseHead& head() const { return head_; }
  bool stream() const { return stream_options_.stream; }
  bool include_usage() const { return stream_options_.include_usage; }

 private:
  void take(const inference::TokenEvent& event, std::string* text);

  EngineLoop& loop_;
  std::shared_ptr<RequestStream> stream_;
  IncrementalDetokenizer detokenizer_;
  StopStrings stops_;
  ResponseHead head_;
  struct {
    bool stream = false;
    bool include_usage = false;
  } stream_options_;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  std::string finish_reason_;
  bool engine_done_ = false;  // the engine sent the last event: nothing to cancel
};

}  // namespace deepspeed::serving
