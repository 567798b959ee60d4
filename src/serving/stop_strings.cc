// StopStrings (stop_strings.h).
#include "serving/stop_strings.h"

#include <algorithm>

namespace deepspeed::serving {

std::string StopStrings::push(const std::string& text) {
  if (stopped_) return "";
  held_ += text;
  // The earliest stop string in the held text. Text already sent cannot hold the start of one (it was held back
  // while it could), so searching the held text alone finds every match.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest tail that some stop string starts with.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStrings::flush() {
  std::string out = stopped_ ? "" : held_;
  held_.clear();
  return out;
}

}  // namespace deepspeed::serving
