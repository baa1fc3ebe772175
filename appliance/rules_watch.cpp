#include "rules_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

namespace vibepit::appliance {
namespace {

// How long the directory must be quiet after an event before the file is read: an editor's
// save or a ConfigMap's swap is several events, and one read should see their end.
constexpr int kSettleMs = 100;
constexpr int kSettleMaxMs = 400;
// The slow re-read, for filesystems that report nothing (a bind mount changed outside).
constexpr int kRescanMs = 5000;

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

// The names in the file's directory whose change can change what the path reads: its own,
// and, when it is a symbolic link into that directory (a ConfigMap's "rules.yaml ->
// ..data/rules.yaml"), the first name of the link's target. Other files there (a busy
// directory) are not watched for.
std::vector<std::string> names_that_matter(const std::string& path) {
  std::vector<std::string> names{base_name(path)};
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n > 0 && target[0] != '/') {
    const std::string t(target, static_cast<std::size_t>(n));
    names.push_back(t.substr(0, t.find('/')));
  }
  return names;
}

// Reads every pending inotify event; true when one was about a name in `names`, or about
// the directory itself.
bool drain(int fd, const std::vector<std::string>& names) {
  alignas(inotify_event) std::array<char, 8192> buf;
  bool relevant = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) return relevant;  // EAGAIN: nothing more
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf.data() + at);
      const std::string_view name = ev->len ? std::string_view(ev->name) : std::string_view();
      if (ev->len == 0 || (ev->mask & IN_Q_OVERFLOW) != 0 ||
          std::find(names.begin(), names.end(), name) != names.end()) {
        relevant = true;
      }
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
}

}  // namespace

StartRules load_start_rules(const std::string& path, const policy::RuleSet& base) {
  StartRules out;
  out.text = config::read_rules_text(path);
  const auto file = config::parse_rules_file(out.text, path);
  try {
    out.rules = config::merge_rules(base, file);
  } catch (const config::RulesFileError& e) {
    throw config::RulesFileError(path + ": " + e.what());
  }
  auto compiled = policy::compile(out.rules, 1);
  if (auto* errors = std::get_if<std::vector<policy::RuleError>>(&compiled)) {
    std::string why = path + ": " + errors->front().message();
    if (errors->size() > 1) why += " (and " + std::to_string(errors->size() - 1) + " more)";
    throw config::RulesFileError(why);
  }
  return out;
}

RulesFileWatch::RulesFileWatch(std::string path, std::string text, control::RuleUpdater& rules)
    : path_(std::move(path)), rules_(rules), last_(std::move(text)) {
  inotify_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_ < 0 || stop_ < 0) {
    const int err = errno;
    if (inotify_ >= 0) ::close(inotify_);
    if (stop_ >= 0) ::close(stop_);
    throw std::runtime_error(std::string("rules-file: cannot watch: ") + std::strerror(err));
  }
  const std::string dir = directory_of(path_);
  constexpr std::uint32_t kEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                    IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
  if (::inotify_add_watch(inotify_, dir.c_str(), kEvents) < 0) {
    // Watched or not, the slow re-read still applies changes.
    spdlog::warn("rules-file: cannot watch {} ({}); re-reading it every {} ms instead", dir,
                 std::strerror(errno), kRescanMs);
  }
  thread_ = std::thread([this] { run(); });
}

RulesFileWatch::~RulesFileWatch() {
  const std::uint64_t one = 1;
  if (::write(stop_, &one, sizeof one) < 0) {
    // The thread still stops at its next wake; nothing else to do here.
  }
  if (thread_.joinable()) thread_.join();
  ::close(inotify_);
  ::close(stop_);
}

void RulesFileWatch::run() {
  std::array<pollfd, 2> fds{{{inotify_, POLLIN, 0}, {stop_, POLLIN, 0}}};
  auto next_rescan = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRescanMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        next_rescan - std::chrono::steady_clock::now());
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (n < 0 && errno != EINTR) {
      spdlog::error("rules-file: poll failed ({}); no longer watching", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    bool changed = false;
    if (fds[0].revents != 0 && drain(inotify_, names_that_matter(path_))) {
      // Wait for the file's names to settle (an editor's save, a ConfigMap's swap are
      // several events), but no longer than kSettleMaxMs, then read once.
      changed = true;
      const auto settle_end =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(kSettleMaxMs);
      while (std::chrono::steady_clock::now() < settle_end) {
        pollfd quiet[2] = {{inotify_, POLLIN, 0}, {stop_, POLLIN, 0}};
        const int q = ::poll(quiet, 2, kSettleMs);
        if (q > 0 && quiet[1].revents != 0) return;
        if (q <= 0 || !drain(inotify_, names_that_matter(path_))) break;
      }
    }
    if (changed || std::chrono::steady_clock::now() >= next_rescan) {
      reload();
      next_rescan = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRescanMs);
    }
  }
}

void RulesFileWatch::reload() {
  std::lock_guard lock(mu_);
  // Each invalid version is counted and logged once; a file that cannot be read, once until
  // the problem changes, not at every re-read that finds it again.
  auto refuse = [&](const std::string& why, bool new_text) {
    if (!new_text && why == last_error_) return;
    last_error_ = why;
    rules_.count_invalid_file();
    spdlog::error("rules file not applied, the rules in force stay: {}", why);
  };
  std::string text;
  try {
    text = config::read_rules_text(path_);
  } catch (const config::RulesFileError& e) {
    refuse(e.what(), false);
    return;
  }
  if (text == last_) return;  // an event that changed nothing (a touch, a rescan)
  last_ = text;
  config::RulesFile file;
  try {
    file = config::parse_rules_file(text, path_);
  } catch (const config::RulesFileError& e) {
    refuse(e.what(), true);
    return;
  }
  auto applied = rules_.apply_rules_file(file);
  if (auto* why = std::get_if<std::string>(&applied)) {
    last_error_ = *why;  // apply_rules_file counted it
    spdlog::error("rules file {} not applied, the rules in force stay: {}", path_, *why);
    return;
  }
  last_error_.clear();
  spdlog::info("rules file {} applied: generation {}", path_, std::get<std::uint64_t>(applied));
}

}  // namespace vibepit::appliance
