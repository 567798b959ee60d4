// RankOutput: whole prefixed lines, partial lines kept until completed or flushed, long lines
// split.
#include "launcher/rank_output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace deepspeed::launcher {
namespace {

// Captures what a RankOutput writes, through a temporary file (a pipe would block on long lines).
class Capture {
 public:
  Capture() : file_(std::tmpfile()) { EXPECT_NE(file_, nullptr); }
  ~Capture() { std::fclose(file_); }
  int fd() const { return fileno(file_); }
  std::string take() {
    std::string out;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd(), buf, sizeof(buf), off)) > 0) {
      out.append(buf, n);
      off += n;
    }
    return out;
  }

 private:
  FILE* file_;
};

TEST(RankOutput, PrefixesEachCompleteLine) {
  Capture c;
  RankOutput out(rank_prefix(3), c.fd());
  out.append("a\nbb\n", 5);
  EXPECT_EQ(c.take(), "[rank3]: a\n[rank3]: bb\n");
}

TEST(RankOutput, JoinsLinesSplitAcrossReads) {
  Capture c;
  RankOutput out(rank_prefix(0), c.fd());
  out.append("hel", 3);
  out.append("lo\nwor", 6);
  out.append("ld\n", 3);
  EXPECT_EQ(c.take(), "[rank0]: hello\n[rank0]: world\n");
}

// Progress frames (a segment ending in '\r') are forwarded in place: prefix, frame, '\r', no
// newline. The next line to the same destination, from any rank, first erases the frame.
TEST(RankOutput, ProgressFramesStayOnOneLineAndAreErasedBeforeTheNextLine) {
  Capture c;
  RankOutput rank0(rank_prefix(0), c.fd());
  RankOutput rank1(rank_prefix(1), c.fd());
  auto send = [](RankOutput& out, const std::string& s) { out.append(s.data(), s.size()); };
  send(rank0, "[##..] 1/4\r[###.] 2");
  send(rank0, "/4\r");
  send(rank1, "hello\n");
  send(rank0, "[####] 4/4\n");
  EXPECT_EQ(c.take(),
            "[rank0]: [##..] 1/4\r"
            "\x1b[K[rank0]: [###.] 2/4\r"
            "\x1b[K[rank1]: hello\n"
            "[rank0]: [####] 4/4\n");
}

TEST(RankOutput, CarriageReturnNewlineEndsALine) {
  Capture c;
  RankOutput out(rank_prefix(2), c.fd());
  const std::string s = "dos\r\nunix\n";
  out.append(s.data(), s.size());
  EXPECT_EQ(c.take(), "[rank2]: dos\n[rank2]: unix\n");
}

TEST(RankOutput, CarriageReturnNewlineSplitAcrossReadsEndsALine) {
  Capture c;
  RankOutput out(rank_prefix(2), c.fd());
  RankOutput other(rank_prefix(3), c.fd());
  auto send = [](RankOutput& to, const std::string& s) { to.append(s.data(), s.size()); };
  send(out, "dos\r");  // a frame until the '\n' comes: then its line just ends
  send(out, "\nnext\r");
  send(other, "hi\n");  // erases the frame "next"...
  send(out, "\n");      // ...which was a line after all: written again
  EXPECT_EQ(c.take(), "[rank2]: dos\r\n[rank2]: next\r\x1b[K[rank3]: hi\n[rank2]: next\n");
}

TEST(RankOutput, FlushWritesPartialLastLineWithNewline) {
  Capture c;
  RankOutput out(rank_prefix(1), c.fd());
  out.append("done\ntail", 9);
  out.flush();
  out.flush();  // nothing left: writes nothing
  EXPECT_EQ(c.take(), "[rank1]: done\n[rank1]: tail\n");
}

TEST(RankOutput, EmptyLinesKeepTheirPrefix) {
  Capture c;
  RankOutput out(rank_prefix(2), c.fd());
  out.append("\n\n", 2);
  EXPECT_EQ(c.take(), "[rank2]: \n[rank2]: \n");
}

TEST(RankOutput, OverlongLinesAreSplit) {
  Capture c;
  RankOutput out("p:", c.fd());
  const std::string big(RankOutput::kMaxLine + 10, 'x');
  out.append(big.data(), big.size());
  out.flush();
  const std::string got = c.take();
  EXPECT_EQ(got,
            "p:" + std::string(RankOutput::kMaxLine, 'x') + "\np:" + std::string(10, 'x') + "\n");
}

}  // namespace
}  // namespace deepspeed::launcher
