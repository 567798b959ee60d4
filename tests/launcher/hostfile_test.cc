// Hostfile parsing: the accepted syntax and every error, with its file:line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "launcher/launcher.h"

namespace deepspeed::launcher {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_hostfile(text, "hostfile");
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Hostfile, ParsesHostsInOrderWithSlotIds) {
  const ResourcePool pool = parse_hostfile("worker-1 slots=2\nworker-0 slots=3\n", "hostfile");
  ASSERT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool[0], (HostSlots{"worker-1", {0, 1}}));
  EXPECT_EQ(pool[1], (HostSlots{"worker-0", {0, 1, 2}}));
}

TEST(Hostfile, SkipsCommentsBlankLinesAndTrailingComments) {
  const ResourcePool pool = parse_hostfile(
      "# cluster\n\n   \n  a slots=1   # first\n\tb\tslots=4\n#c slots=9\nc slots=2#tight",
      "hostfile");
  ASSERT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool[0], (HostSlots{"a", {0}}));
  EXPECT_EQ(pool[1], (HostSlots{"b", {0, 1, 2, 3}}));
  EXPECT_EQ(pool[2], (HostSlots{"c", {0, 1}}));
}

TEST(Hostfile, LastLineWithoutNewlineAndCrlfAreAccepted) {
  const ResourcePool pool = parse_hostfile("a slots=1\r\nb slots=2", "hostfile");
  ASSERT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool[1].slots.size(), 2u);
}

TEST(Hostfile, BadSyntaxNamesFileLineAndText) {
  EXPECT_EQ(error_of("a slots=1\n\nworker-1 slot=4\n"),
            "hostfile:3: expected 'hostname slots=N', got 'worker-1 slot=4'");
  EXPECT_EQ(error_of("lonely-host\n"),
            "hostfile:1: expected 'hostname slots=N', got 'lonely-host'");
  EXPECT_EQ(error_of("a slots=x\n"), "hostfile:1: expected 'hostname slots=N', got 'a slots=x'");
  EXPECT_EQ(error_of("a slots=-1\n"), "hostfile:1: expected 'hostname slots=N', got 'a slots=-1'");
  EXPECT_EQ(error_of("a slots=2 extra\n"),
            "hostfile:1: expected 'hostname slots=N', got 'a slots=2 extra'");
  EXPECT_EQ(error_of("slots=2\n"), "hostfile:1: expected 'hostname slots=N', got 'slots=2'");
}

TEST(Hostfile, HostNamesThatWouldBreakRemoteCommandsAreErrors) {
  // A leading '-' is an ssh option (-oProxyCommand=... runs a command here) or pdsh's "exclude".
  EXPECT_EQ(error_of("node-1 slots=1\n-oProxyCommand=touch slots=1\n"),
            "hostfile:2: host '-oProxyCommand=touch' is not a valid host name (host names may hold "
            "letters, digits and . - _ : @ and must not start with '-')");
  EXPECT_NE(error_of("a,b slots=1\n").find("'a,b' is not a valid host name"), std::string::npos);
  EXPECT_NE(error_of("n[1-2] slots=1\n").find("is not a valid host name"), std::string::npos);
  EXPECT_NE(error_of("a;b slots=1\n").find("is not a valid host name"), std::string::npos);
  EXPECT_EQ(parse_hostfile("user@node-1.example.com slots=1\n10.0.0.2 slots=1\nfe80::1 slots=1\n",
                           "hostfile")
                .size(),
            3u);
}

TEST(Hostfile, ZeroSlotsIsAnError) {
  EXPECT_EQ(error_of("a slots=1\nb slots=0\n"),
            "hostfile:2: host 'b' has slots=0; every host needs at least one slot");
}

TEST(Hostfile, DuplicateHostIsAnError) {
  EXPECT_EQ(error_of("a slots=1\nb slots=1\na slots=2\n"),
            "hostfile:3: host 'a' is listed twice; give each host one line");
}

TEST(Hostfile, EmptyOrCommentOnlyIsAnError) {
  EXPECT_EQ(error_of(""),
            "hostfile: hostfile lists no hosts; expected lines of 'hostname slots=N'");
  EXPECT_EQ(error_of("# nothing\n\n"),
            "hostfile: hostfile lists no hosts; expected lines of 'hostname slots=N'");
}

TEST(Hostfile, FetchReturnsNulloptForMissingFile) {
  EXPECT_FALSE(fetch_hostfile("/nonexistent/dir/hostfile").has_value());
}

TEST(Hostfile, FetchReadsFileAndNamesItInErrors) {
  char path[] = "/tmp/ds_hostfile_test.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << "h1 slots=2\n"; }
  const std::optional<ResourcePool> pool = fetch_hostfile(path);
  ASSERT_TRUE(pool.has_value());
  EXPECT_EQ((*pool)[0], (HostSlots{"h1", {0, 1}}));
  { std::ofstream(path) << "h1 slots=2\nh2 slots 2\n"; }
  try {
    fetch_hostfile(path);
    ADD_FAILURE() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(std::string(e.what()),
              std::string(path) + ":2: expected 'hostname slots=N', got 'h2 slots 2'");
  }
  unlink(path);
}

TEST(Hostfile, FetchRejectsDirectory) { EXPECT_THROW(fetch_hostfile("/tmp"), LaunchError); }

}  // namespace
}  // namespace deepspeed::launcher
