#include "vibepit/launcher/host/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace vibepit::launcher {

Child::Child(const std::vector<std::string>& argv, Output output) {
  if (argv.empty()) throw std::invalid_argument("Child: empty argv");
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (output == Output::pipe || output == Output::pipe_with_stderr) {
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe: " + std::string(strerror(errno)));
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    if (output == Output::pipe_with_stderr)
      posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  } else if (output == Output::discard) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Nothing else of ours: the engine connections that another thread has open (Asio does not
  // mark its sockets close-on-exec) would otherwise live on in a long-lived child such as
  // the project's filter, and keep a container's attached stream open with it.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Nor our signal dispositions: vibepit blocks the stop signals in its threads (one thread
  // takes them) and ignores SIGPIPE; a child starts with none blocked and SIGPIPE at its
  // default, as from a shell.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const int rc = ::posix_spawnp(&pid_, args[0], &actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (fds[1] >= 0) ::close(fds[1]);
  if (rc != 0) {
    if (fds[0] >= 0) ::close(fds[0]);
    pid_ = -1;
    throw std::runtime_error("cannot run " + argv[0] + ": " + strerror(rc));
  }
  out_ = fds[0];
}

Child::~Child() {
  if (out_ >= 0) ::close(out_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

std::size_t Child::read(char* buf, std::size_t n) {
  if (out_ < 0) return 0;
  for (;;) {
    ssize_t r = ::read(out_, buf, n);
    if (r >= 0) return static_cast<std::size_t>(r);
    if (errno != EINTR)
      throw std::runtime_error("read from child: " + std::string(strerror(errno)));
  }
}

int Child::wait() {
  if (pid_ <= 0) return -1;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid: " + std::string(strerror(errno)));
  }
  pid_ = -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

std::string run_capture(const std::vector<std::string>& argv, int& status, Child::Output output) {
  Child c(argv, output);
  std::string out;
  char buf[4096];
  while (std::size_t n = c.read(buf, sizeof buf)) out.append(buf, n);
  status = c.wait();
  return out;
}

}  // namespace vibepit::launcher
