// ActiveRequest (active_request.h).
#include "serving/active_request.h"

#include <utility>

namespace deepspeed::serving {

ActiveRequest::ActiveRequest(EngineLoop& loop, std::shared_ptr<RequestStream> stream, const data::Tokenizer& tokenizer,
                             const CompletionRequest& request, ResponseHead head, int64_t prompt_tokens)
    : loop_(loop),
      stream_(std::move(stream)),
      detokenizer_(tokenizer),
      stops_(request.stop),
      head_(std::move(head)),
      prompt_tokens_(prompt_tokens) {
  stream_options_.stream = request.stream;
  stream_options_.include_usage = request.include_usage;
}

ActiveRequest::~ActiveRequest() {
  if (!engine_done_) loop_.cancel(stream_->id());
}

bool ActiveRequest::next(std::string* text, std::chrono::milliseconds wait) {
  inference::TokenEvent event;
  if (done() || !stream_->pop(&event, wait)) return false;
  take(event, text);
  while (!done() && stream_->pop(&event, std::chrono::milliseconds(0))) take(event, text);
  return true;
}

void ActiveRequest::take(const inference::TokenEvent& event, std::string* text) {
  using inference::FinishReason;
  if (event.finish == FinishReason::kCancelled) {
    engine_done_ = true;
    throw RequestError(503, "the request was cancelled by the server (shutting down, or its engine failed)", "",
                       "server_error");
  }
  if (event.token >= 0) {
    ++completion_tokens_;
    *text += stops_.push(detokenizer_.push(event.token));
  }
  if (event.finish != FinishReason::kNone) {
    engine_done_ = true;
    *text += stops_.push(detokenizer_.flush());
    *text += stops_.flush();
    finish_reason_ = stops_.stopped() || event.finish == FinishReason::kStop ? "stop" : "length";
  } else if (stops_.stopped()) {
    // A stop string ends the request here; the destructor's cancel frees its blocks.
    finish_reason_ = "stop";
  }
}

}  // namespace deepspeed::serving
