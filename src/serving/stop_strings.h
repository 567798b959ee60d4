// OpenAI's `stop`: generation ends where the text first contains one of up to 4 strings, and the reply holds the
// text before it. While streaming, text that could be the start of a stop string is held back until the next
// tokens show whether it is one, so a stop string never reaches the client in part.
//
// One request's state: use from one thread at a time.
#pragma once

#include <string>
#include <vector>

namespace deepspeed::serving {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends new text; returns what may be sent now. Once a stop string appears, returns the text before it, sets
  // stopped() and drops the rest (later pushes return nothing).
  std::string push(const std::string& text);
  // The held-back text at the end of generation.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace deepspeed::serving
