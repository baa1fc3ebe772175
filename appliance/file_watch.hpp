#pragma once
// Files the appliance re-reads when they change: the watched rules file and the tenants'
// token files (docs/fleet.md). inotify watches each file's directory, so a file replaced by a
// rename, and the symbolic-link swap by which a Kubernetes ConfigMap or Secret volume updates
// its files, are seen as well as a file written in place; a slow re-read every few seconds
// catches what a filesystem does not report. What a change means is the caller's: `changed`
// reads the files and decides.
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace vibepit::appliance {

class FileWatch {
 public:
  // Starts the watching thread, which calls `changed` once a burst of events about one of
  // `paths` has settled, and every few seconds whatever happened. `what` names the files in
  // log lines ("rules-file"). Throws std::runtime_error when no inotify instance can be made.
  FileWatch(std::string what, std::vector<std::string> paths, std::function<void()> changed);
  ~FileWatch();  // stops and joins the thread: `changed` is not called after it
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

 private:
  void run();

  std::string what_;
  std::vector<std::string> paths_;
  std::function<void()> changed_;
  int inotify_ = -1;
  int stop_ = -1;  // an eventfd the destructor writes
  std::thread thread_;
};

}  // namespace vibepit::appliance
