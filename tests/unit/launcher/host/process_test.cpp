// Children the launcher spawns get standard input, output and error, and nothing else of
// the launcher's: its engine connections must not outlive it in a long-lived child.
#include "vibepit/launcher/host/process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <string>

using namespace vibepit::launcher;

TEST(ProcessTest, ChildInheritsNoDescriptorBeyondStandardOnes) {
  // As Asio opens a socket: without close-on-exec. Numbered from 100, clear of the
  // descriptors the child opens itself (ls its directory's).
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  const int sock = ::fcntl(pair[0], F_DUPFD, 100);
  const int file = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(file, 0);
  const int plain = ::fcntl(file, F_DUPFD, 110);
  ASSERT_GE(sock, 100);
  ASSERT_GE(plain, 110);
  int status = -1;
  const std::string fds = run_capture({"ls", "/proc/self/fd"}, status);
  EXPECT_EQ(status, 0);
  for (const int fd : {sock, plain})
    EXPECT_EQ(("\n" + fds).find("\n" + std::to_string(fd) + "\n"), std::string::npos)
        << "descriptor " << fd << " reached the child; it had:\n"
        << fds;
  EXPECT_NE(fds.find("0\n"), std::string::npos);
  for (const int fd : {pair[0], pair[1], sock, file, plain}) ::close(fd);
}

TEST(ProcessTest, ChildStartsWithNoSignalBlockedOrIgnoredByUs) {
  // As vibepit is while it runs: the stop signals blocked, SIGPIPE ignored.
  sigset_t blocked, old;
  sigemptyset(&blocked);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&blocked, s);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &blocked, &old), 0);
  auto old_pipe = std::signal(SIGPIPE, SIG_IGN);
  int status = -1;
  const std::string out =
      run_capture({"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"}, status);
  std::signal(SIGPIPE, old_pipe);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find("SigBlk:\t0000000000000000"), std::string::npos) << out;
  // SIGPIPE is bit 13 of SigIgn: 0x1000.
  const auto ign = std::stoull(out.substr(out.find("SigIgn:") + 8, 16), nullptr, 16);
  EXPECT_EQ(ign & 0x1000, 0u) << out;
}

TEST(ProcessTest, CapturesOutputAndStatus) {
  int status = -1;
  EXPECT_EQ(run_capture({"sh", "-c", "echo out; echo err >&2; exit 3"}, status,
                        Child::Output::pipe_with_stderr),
            "out\nerr\n");
  EXPECT_EQ(status, 3);
  EXPECT_THROW(Child({"/nonexistent/vibepit-no-such-program"}, Child::Output::discard),
               std::runtime_error);
}
