#pragma once
// Child processes the launcher needs on the host (ldd, debootstrap, tar): spawned with an
// argument vector, never through a shell.
#include <sys/types.h>

#include <string>
#include <vector>

namespace vibepit::launcher {

class Child {
 public:
  enum class Output { inherit, pipe, pipe_with_stderr, discard };
  // Starts argv[0] (looked up in PATH). Throws std::runtime_error naming the command.
  Child(const std::vector<std::string>& argv, Output output);
  ~Child();  // kills and reaps a child that is still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int stdout_fd() const { return out_; }  // -1 unless Output::pipe*
  // Read up to n bytes of the child's output; 0 at its end.
  std::size_t read(char* buf, std::size_t n);
  // Reap the child: its exit status, or 128 + the signal that ended it.
  int wait();

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

// Run to completion and return what it printed on stdout (and stderr, with
// Output::pipe_with_stderr); `status` gets the exit status.
std::string run_capture(const std::vector<std::string>& argv, int& status,
                        Child::Output output = Child::Output::pipe);

}  // namespace vibepit::launcher
