// StopStrings and IncrementalDetokenizer, the two halves of turning streamed tokens into streamed text: whatever
// way the text arrives in pieces, what is sent adds up to the text a whole-text oracle gives (std::string::find for
// the stop strings; the original text, which the shipped tokenizer round-trips as `tokenizers` does, for the
// detokenizer), and no piece sent holds half a character.
#include "serving/stop_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "deepspeed/data/tokenizer.h"
#include "serving/incremental_detokenizer.h"

namespace ds = deepspeed::serving;

namespace {

// The text before the first appearance of any stop string, or all of it.
std::string oracle(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) first = std::min(first, text.find(s));
  return first == std::string::npos ? text : text.substr(0, first);
}

bool valid_utf8_whole(const std::string& s) {
  return s.find("\xEF\xBF\xBD") == std::string::npos;  // decode writes U+FFFD for bytes of a cut character
}

}  // namespace

TEST(StopStrings, AnySplitGivesTheTextBeforeTheFirstStop) {
  const std::string text = "the cat sat on the mat; the end of the story";
  const std::vector<std::vector<std::string>> cases = {
      {"mat"}, {"the end", "sat"}, {"story"}, {"absent"}, {"t;", "at on"}, {"e e"}, {"yy", "the"}};
  std::mt19937 rng(7);
  for (const auto& stops : cases) {
    for (int trial = 0; trial < 50; ++trial) {
      ds::StopStrings s(stops);
      std::string sent;
      for (size_t i = 0; i < text.size();) {
        const size_t n = 1 + rng() % 4;
        sent += s.push(text.substr(i, n));
        i += n;
      }
      if (!s.stopped()) sent += s.flush();
      ASSERT_EQ(sent, oracle(text, stops)) << "stops[0] " << stops[0] << ", trial " << trial;
      EXPECT_EQ(s.stopped(), oracle(text, stops) != text);
    }
  }
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStop) {
  ds::StopStrings s({"STOP"});
  EXPECT_EQ(s.push("abc ST"), "abc ");  // "ST" may begin STOP
  EXPECT_EQ(s.push("x"), "STx");        // it did not
  EXPECT_EQ(s.push("S"), "");
  EXPECT_EQ(s.push("TOP and more"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("later"), "");
}

TEST(IncrementalDetokenizer, PiecesAreWholeCharactersAndAddUpToTheText) {
  const auto tok = deepspeed::data::Tokenizer::from_file(DS_TEST_TOKENIZER_DIR);
  const std::string text =
      "Caf\xC3\xA9 cr\xC3\xA8me, na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82 ok";
  const std::vector<int64_t> ids = tok->encode(text);
  // The test means something only if some token holds part of a character.
  bool split = false;
  for (const int64_t id : ids) split = split || !valid_utf8_whole(tok->decode({id}));
  ASSERT_TRUE(split) << "no token of the text cuts a character";
  ds::IncrementalDetokenizer d(*tok);
  std::string sent;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = d.push(ids[i]);
    EXPECT_TRUE(valid_utf8_whole(piece)) << "piece " << i << " holds half a character";
    sent += piece;
    if (i == 3) sent += d.push(*tok->token_id("<|end_of_text|>"));  // special tokens are skipped
  }
  sent += d.flush();
  EXPECT_EQ(sent, text);
}

TEST(IncrementalDetokenizer, ACharacterCutAtTheEndComesOutAsDecodeWritesIt) {
  const auto tok = deepspeed::data::Tokenizer::from_file(DS_TEST_TOKENIZER_DIR);
  std::vector<int64_t> ids = tok->encode("ok \xF0\x9F\x99\x82");
  while (valid_utf8_whole(tok->decode(ids))) ids.pop_back();  // cut inside the emoji
  ds::IncrementalDetokenizer d(*tok);
  std::string sent;
  for (const int64_t id : ids) sent += d.push(id);
  EXPECT_TRUE(valid_utf8_whole(sent));
  sent += d.flush();
  EXPECT_EQ(sent, tok->decode(ids));
}
