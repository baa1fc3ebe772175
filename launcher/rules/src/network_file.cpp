#include "vibepit/launcher/rules/network_file.hpp"

#include <unordered_set>

#include <yaml-cpp/yaml.h>

#include "vibepit/launcher/host/untrusted_file.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
namespace {

constexpr const char* kKeys[] = {"allow-http", "allow-dns", "presets", "credentials"};

std::vector<std::string>* list_for(NetworkFile& f, const std::string& key) {
  if (key == "allow-http") return &f.allow_http;
  if (key == "allow-dns") return &f.allow_dns;
  if (key == "presets") return &f.presets;
  if (key == "credentials") return &f.credentials;
  return nullptr;
}

// Length of the UTF-8 sequence at s[i], or 0 when it is not valid UTF-8.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Every entry is a rule, a DNS name or a preset name: one word of printable ASCII, or for
// allow-http (`spaces`) words joined by single spaces (DOMAIN:PORT METHODS PATH). Checked
// here, on the parsed value, because YAML can spell other bytes in many ways (escapes, block
// scalars, folded lines), and an entry with a line break or a stray byte would neither
// compile nor survive an in-place edit unchanged.
void check_entry(const std::string& value, const std::string& what, bool spaces = false) {
  for (unsigned char c : value) {
    if (c >= 0x80) {
      throw NetworkFileError(what + " is not ASCII; IDNs must be given in punycode (\"xn--...\")");
    }
    if (c == ' ' && spaces) continue;  // the rule grammar says where
    if (c <= 0x20 || c == 0x7f) {
      throw NetworkFileError(what +
                             " holds a space, line break or control character; entries "
                             "are single words such as example.com:443");
    }
  }
}

std::string where(const std::string& name, const YAML::Mark& m) {
  return name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// One entry as YAML text: quoted when the plain form would mean something else ("*..." is
// an alias, for one).
std::string scalar(const std::string& value) {
  YAML::Emitter e;
  e << value;
  return e.c_str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string rewrite(const NetworkFile& f, const std::string& original) {
  YAML::Node root = original.empty() ? YAML::Node(YAML::NodeType::Map) : YAML::Load(original);
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  NetworkFile copy = f;
  for (const char* key : kKeys) {
    const auto& list = *list_for(copy, key);
    if (list.empty() && !root[key]) continue;
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& v : list) seq.push_back(v);
    root[key] = seq;
  }
  YAML::Emitter e;
  e << root;
  return std::string(e.c_str()) + "\n";
}

}  // namespace

NetworkFile parse_network_yaml(const std::string& text, const std::string& name) {
  NetworkFile out;
  // Text only: a NUL or another control byte ends or bends the YAML stream in ways that
  // would make an in-place edit mean something else.
  int line = 1;
  for (std::size_t i = 0; i < text.size();) {
    auto ch = static_cast<unsigned char>(text[i]);
    if (ch == '\n') ++line;
    if ((ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') || ch == 0x7f) {
      throw NetworkFileError(name + ":" + std::to_string(line) + ": a control character (byte " +
                             std::to_string(ch) + "); the file must be plain text");
    }
    if (ch == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) {
      throw NetworkFileError(name + ":" + std::to_string(line) +
                             ": a carriage return that does not end a line");
    }
    auto n = utf8_length(text, i);
    if (n == 0) {
      throw NetworkFileError(name + ":" + std::to_string(line) + ": not valid UTF-8");
    }
    i += n;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw NetworkFileError(where(name, e.mark) + ": " + e.msg);
  }
  if (root.IsNull() || !root.IsDefined()) return out;
  if (!root.IsMap()) {
    throw NetworkFileError(where(name, root.Mark()) +
                           ": the top level must be a mapping with the keys allow-http, "
                           "allow-dns, presets and credentials");
  }
  std::unordered_set<std::string> seen;
  for (const auto& kv : root) {
    auto key = kv.first.Scalar();
    auto* list = list_for(out, key);
    if (list && !seen.insert(key).second) {
      throw NetworkFileError(where(name, kv.first.Mark()) + ": \"" + key + "\" appears twice");
    }
    if (!list) {
      throw NetworkFileError(where(name, kv.first.Mark()) + ": unknown key \"" + key +
                             "\" (allow-http, allow-dns, presets, credentials)");
    }
    const auto& v = kv.second;
    if (v.IsNull()) continue;
    if (!v.IsSequence()) {
      throw NetworkFileError(where(name, v.Mark()) + ": " + key + " must be a list of strings");
    }
    for (const auto& item : v) {
      if (!item.IsScalar()) {
        throw NetworkFileError(where(name, item.Mark()) + ": " + key + " entries must be strings");
      }
      check_entry(item.Scalar(), where(name, item.Mark()) + ": " + key + " entry",
                  key == "allow-http" || key == "credentials");
      list->push_back(item.Scalar());
    }
  }
  return out;
}

NetworkFile read_network_file(const fs::path& path, std::optional<uid_t> also_owner) {
  std::optional<std::string> text;
  try {
    text = read_untrusted_file(path, 1 << 20, also_owner);
  } catch (const UntrustedFileError& e) {
    throw NetworkFileError(e.what());
  }
  return text ? parse_network_yaml(*text, path.string()) : NetworkFile{};
}

std::string add_to_network_yaml(const std::string& text, const std::string& key,
                                const std::vector<std::string>& entries,
                                std::vector<std::string>& appended) {
  const std::string name = "network.yaml";
  auto before = parse_network_yaml(text, name);
  auto* list = list_for(before, key);
  if (!list || key == "presets") throw NetworkFileError("cannot add entries to \"" + key + "\"");
  std::unordered_set<std::string> have(list->begin(), list->end());
  appended.clear();
  for (const auto& e : entries) {
    if (have.insert(e).second) appended.push_back(e);
  }
  if (appended.empty()) return text;

  NetworkFile after = before;
  list_for(after, key)->insert(list_for(after, key)->end(), appended.begin(), appended.end());

  const YAML::Node root = text.empty() ? YAML::Node() : YAML::Load(text);
  const bool present = root.IsMap() && root[key].IsDefined();
  const YAML::Node node = present ? root[key] : YAML::Node();
  std::string out;
  if (!present) {
    // A new key at the end of the file.
    out = text;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += key + ":\n";
    for (const auto& e : appended) out += "  - " + scalar(e) + "\n";
  } else if (node.IsSequence() && node.size() > 0 && node.Style() == YAML::EmitterStyle::Block) {
    // After the list's last item, at its indentation.
    auto lines = split_lines(text);
    auto line = static_cast<std::size_t>(node[node.size() - 1].Mark().line);
    if (line < lines.size()) {
      const auto& item = lines[line];
      auto dash = item.find('-');
      if (dash != std::string::npos) {
        std::string indent = item.substr(0, dash);
        std::size_t at = line + 1;
        // Skip the item's continuation lines (indented deeper than its dash).
        while (at < lines.size()) {
          auto first = lines[at].find_first_not_of(' ');
          if (first == std::string::npos || lines[at][first] == '#' || first <= dash) break;
          ++at;
        }
        std::vector<std::string> added;
        added.reserve(appended.size());
        for (const auto& e : appended) added.push_back(indent + "- " + scalar(e));
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
        for (const auto& l : lines) out += l + "\n";
        if (!text.empty() && text.back() != '\n') out.pop_back();
      }
    }
  }
  // Check the edit: everything that was there is still there, plus the new entries. When an
  // in-place edit is not possible (flow style, an empty key) the file is written anew.
  bool ok = false;
  if (!out.empty()) {
    try {
      auto check = parse_network_yaml(out, name);
      ok = check.allow_http == after.allow_http && check.allow_dns == after.allow_dns &&
           check.presets == after.presets && check.credentials == after.credentials;
    } catch (const NetworkFileError&) {
      ok = false;
    }
  }
  if (!ok) out = rewrite(after, text);
  return out;
}

std::vector<std::string> save_entries(const fs::path& path, const std::string& key,
                                      const std::vector<std::string>& entries) {
  std::string text;
  try {
    text = read_untrusted_file(path).value_or("");
  } catch (const UntrustedFileError& e) {
    throw NetworkFileError(e.what());
  }
  std::vector<std::string> appended;
  std::string out;
  try {
    out = add_to_network_yaml(text, key, entries, appended);
  } catch (const NetworkFileError& e) {
    // Messages name "network.yaml"; name the real path instead.
    std::string msg = e.what();
    if (msg.rfind("network.yaml", 0) == 0) msg = path.string() + msg.substr(12);
    throw NetworkFileError(msg);
  }
  if (appended.empty()) return appended;
  try {
    write_untrusted_file(path, out);
  } catch (const UntrustedFileError& e) {
    throw NetworkFileError(e.what());
  }
  return appended;
}

}  // namespace vibepit::launcher
