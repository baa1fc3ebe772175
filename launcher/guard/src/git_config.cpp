// The config a session's copy of the project's git directory gets (git_shield.hpp): only
// keys that say where things are, never one that names a program or holds a credential.
#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "vibepit/launcher/guard/git_shield.hpp"

namespace vibepit::launcher {
namespace {

// Keys kept as they are (section and name lower case, as `git config --list` prints them).
constexpr std::array<std::string_view, 17> kKeep = {
    "core.repositoryformatversion",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.filemode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "extensions.objectformat",
    "extensions.partialclone",
    "user.name",
    "user.email",
    "init.defaultbranch",
    "pull.rebase",
    "push.default",
};
// Per remote and per branch: where they are, never how to reach them (no sshCommand,
// receivepack, uploadpack, proxy or header).
constexpr std::array<std::string_view, 9> kRemote = {"url",    "pushurl",  "fetch",
                                                     "push",   "promisor", "partialclonefilter",
                                                     "tagopt", "mirror",   "prune"};
constexpr std::array<std::string_view, 4> kBranch = {"remote", "pushremote", "merge", "rebase"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view s) {
  for (auto e : set)
    if (e == s) return true;
  return false;
}

struct Key {
  std::string section, subsection, name;
};

// "remote.origin.url" -> {remote, origin, url}; a subsection may hold dots.
Key split(std::string_view key) {
  const auto first = key.find('.'), last = key.rfind('.');
  if (first == std::string_view::npos) return {std::string(key), "", ""};
  if (first == last)
    return {std::string(key.substr(0, first)), "", std::string(key.substr(last + 1))};
  return {std::string(key.substr(0, first)), std::string(key.substr(first + 1, last - first - 1)),
          std::string(key.substr(last + 1))};
}

bool keep(const Key& k, const std::string& full) {
  if (k.subsection.empty()) return in(kKeep, full);
  if (k.section == "remote") return in(kRemote, k.name);
  if (k.section == "branch") return in(kBranch, k.name);
  return false;
}

// A value or subsection in double quotes, escaped as git reads it back.
std::string git_quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string without_userinfo(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;  // scp-like "git@host:path": no secret there
  const auto start = scheme + 3;
  const auto end = url.find_first_of("/?#", start);
  const auto at = url.rfind('@', end == std::string::npos ? std::string::npos : end);
  if (at == std::string::npos || at < start) return url;
  return url.substr(0, start) + url.substr(at + 1);
}

std::string sandbox_git_config(const std::string& null_list) {
  // Entries in their order, grouped under their section as they first appear.
  std::vector<std::pair<std::string, std::string>> heads;  // "[section \"sub\"]" text, key
  std::vector<std::vector<std::string>> lines;
  auto group = [&](const Key& k) -> std::vector<std::string>& {
    const std::string head = k.subsection.empty()
                                 ? "[" + k.section + "]"
                                 : "[" + k.section + " " + git_quoted(k.subsection) + "]";
    for (std::size_t i = 0; i < heads.size(); ++i)
      if (heads[i].first == head) return lines[i];
    heads.emplace_back(head, k.section);
    lines.emplace_back();
    return lines.back();
  };
  group({"core", "", ""}).emplace_back("\tbare = false");
  std::string_view rest(null_list);
  while (!rest.empty()) {
    const auto end = rest.find('\0');
    const std::string_view entry = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    const auto nl = entry.find('\n');
    const std::string full(entry.substr(0, nl));
    std::string value = nl == std::string_view::npos ? "true" : std::string(entry.substr(nl + 1));
    const Key k = split(full);
    if (k.name.empty() || !keep(k, full)) continue;
    if (k.name == "url" || k.name == "pushurl") value = without_userinfo(value);
    group(k).push_back("\t" + k.name + " = " + git_quoted(value));
  }
  std::string out;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    out += heads[i].first + "\n";
    for (const auto& l : lines[i]) out += l + "\n";
  }
  return out;
}

}  // namespace vibepit::launcher
