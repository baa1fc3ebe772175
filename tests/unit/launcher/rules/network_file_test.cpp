#include "vibepit/launcher/rules/network_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace vibepit::launcher {
namespace {

std::string add(const std::string& text, const std::string& key, std::vector<std::string> entries,
                std::vector<std::string>* appended = nullptr) {
  std::vector<std::string> got;
  auto out = add_to_network_yaml(text, key, entries, got);
  if (appended) *appended = got;
  return out;
}

TEST(NetworkFile, AppendsInPlaceKeepingCommentsAndOrder) {
  const std::string text =
      "# project policy\n"
      "allow-dns:\n"
      "  - example.com   # docs\n"
      "allow-http:\n"
      "    - example.com:443  # the site\n"
      "    # keep me\n"
      "presets: [python]\n";
  std::vector<std::string> appended;
  auto out = add(text, "allow-http", {"example.com:443", "*.pypi.org:443", "api.github.com:443"},
                 &appended);
  EXPECT_EQ(appended, (std::vector<std::string>{"*.pypi.org:443", "api.github.com:443"}));
  EXPECT_EQ(out,
            "# project policy\n"
            "allow-dns:\n"
            "  - example.com   # docs\n"
            "allow-http:\n"
            "    - example.com:443  # the site\n"
            "    - \"*.pypi.org:443\"\n"
            "    - api.github.com:443\n"
            "    # keep me\n"
            "presets: [python]\n");
  auto f = parse_network_yaml(out, "t");
  EXPECT_EQ(f.allow_http,
            (std::vector<std::string>{"example.com:443", "*.pypi.org:443", "api.github.com:443"}));
  EXPECT_EQ(f.presets, std::vector<std::string>{"python"});
}

TEST(NetworkFile, NewKeyGoesAtTheEnd) {
  auto out = add("# only a comment", "allow-dns", {"*.example.com"});
  EXPECT_EQ(out, "# only a comment\nallow-dns:\n  - \"*.example.com\"\n");
  EXPECT_EQ(add("", "allow-http", {"a.test:80"}), "allow-http:\n  - a.test:80\n");
}

TEST(NetworkFile, AMethodAndPathRuleRoundTrips) {
  const std::vector<std::string> entries = {"api.github.com:443 GET,HEAD /repos/acme/**",
                                            "*.pkg.test:443 * /simple/*/x"};
  auto out = add("allow-http:\n  - a.test:80\n", "allow-http", entries);
  auto f = parse_network_yaml(out, "t");
  EXPECT_EQ(f.allow_http, (std::vector<std::string>{"a.test:80", entries[0], entries[1]})) << out;
}

TEST(NetworkFile, NothingNewLeavesTheTextAlone) {
  const std::string text = "allow-http:\n- a.test:80 # x\n";
  std::vector<std::string> appended;
  EXPECT_EQ(add(text, "allow-http", {"a.test:80"}, &appended), text);
  EXPECT_TRUE(appended.empty());
}

TEST(NetworkFile, FlowOrEmptyListsAreRewrittenCorrectly) {
  for (const std::string text :
       {"allow-http: [a.test:80]\nallow-dns: [x.test]\n", "allow-http:\nallow-dns:\n  - x.test\n",
        "allow-http: []\nallow-dns: [x.test]\n"}) {
    auto out = add(text, "allow-http", {"b.test:443"});
    auto f = parse_network_yaml(out, "t");
    EXPECT_EQ(f.allow_http.back(), "b.test:443") << text << "\n->\n" << out;
    EXPECT_EQ(f.allow_dns, std::vector<std::string>{"x.test"}) << out;
  }
}

// One row per bad file: the message names the place and the problem.
TEST(NetworkFile, ErrorsNameTheLine) {
  struct Row {
    const char* text;
    const char* says;
  } rows[] = {
      {"allow-http: [unclosed\n", "t:"},
      {"- a\n- b\n", "top level must be a mapping"},
      {"allow-htp:\n  - a.test:80\n", "t:1:1: unknown key \"allow-htp\""},
      {"allow-http: a.test:80\n", "t:1:13: allow-http must be a list of strings"},
      {"allow-dns:\n  - {a: b}\n", "t:2:5: allow-dns entries must be strings"},
      {"allow-dns:\n  - a\x01b\n", "t:2: a control character"},
      {"allow-dns:\n  - \"a\xcd\xcc\"\n", "t:2: not valid UTF-8"},
      {"allow-dns:\n  - a\r  - b\n", "t:2: a carriage return"},
      {"allow-dns: [a]\nallow-dns: [b]\n", "t:2:1: \"allow-dns\" appears twice"},
      // YAML spells bytes no rule can hold in many ways; each is refused, by position.
      {"allow-http:\n  - |\n    a.test:80\n", "t:2:5: allow-http entry holds a space, line break"},
      {"allow-dns:\n  - \"a\\_b\"\n", "t:2:5: allow-dns entry is not ASCII"},
      {"allow-dns:\n  - \"a\\tb\"\n", "t:2:5: allow-dns entry holds a space"},
      {"allow-dns:\n  - \"b\u00fccher.example\"\n", "IDNs must be given in punycode"},
      {"presets:\n  - \"py thon\"\n", "t:2:5: presets entry holds a space"},
  };
  for (const auto& row : rows) {
    try {
      parse_network_yaml(row.text, "t");
      ADD_FAILURE() << "accepted: " << row.text;
    } catch (const NetworkFileError& e) {
      EXPECT_NE(std::string(e.what()).find(row.says), std::string::npos)
          << row.text << " -> " << e.what();
    }
  }
}

}  // namespace
}  // namespace vibepit::launcher

using namespace vibepit::launcher;

// .vibepit/ is writable by the sandbox: whatever it plants there, saving and reading never
// follow a symlink out of the project.
namespace {
struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() /
          ("vp-untrusted-" + std::to_string(::getpid()) + "-" + std::to_string(++n()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "project");
    std::filesystem::create_directories(dir / "outside");
    std::ofstream(dir / "outside/victim") << "precious\n";
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  static int& n() {
    static int k = 0;
    return k;
  }
  std::string victim() const {
    std::ifstream in(dir / "outside/victim");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};
}  // namespace

TEST(NetworkFileSafety, PlantedTemporarySymlinkIsNotFollowed) {
  Scratch s;
  const auto file = s.dir / "project/.vibepit/network.yaml";
  std::filesystem::create_directories(file.parent_path());
  std::filesystem::create_symlink(s.dir / "outside/victim",
                                  s.dir / "project/.vibepit/network.yaml.tmp");
  auto saved = save_entries(file, "allow-http", {"example.com:443"});
  EXPECT_EQ(saved, (std::vector<std::string>{"example.com:443"}));
  EXPECT_EQ(s.victim(), "precious\n");  // the link's target is untouched
  EXPECT_FALSE(std::filesystem::is_symlink(s.dir / "project/.vibepit/network.yaml.tmp"));
  EXPECT_FALSE(std::filesystem::exists(s.dir / "project/.vibepit/network.yaml.tmp"));
  EXPECT_EQ(read_network_file(file).allow_http, (std::vector<std::string>{"example.com:443"}));
}

TEST(NetworkFileSafety, SymlinkedFileOrDirectoryIsRefused) {
  Scratch s;
  std::filesystem::create_directories(s.dir / "project/.vibepit");
  const auto file = s.dir / "project/.vibepit/network.yaml";
  std::filesystem::create_symlink(s.dir / "outside/victim", file);
  EXPECT_THROW(read_network_file(file), NetworkFileError);
  EXPECT_THROW(save_entries(file, "allow-http", {"example.com:443"}), NetworkFileError);
  EXPECT_EQ(s.victim(), "precious\n");

  Scratch t;
  std::filesystem::create_symlink(t.dir / "outside", t.dir / "project/.vibepit");
  const auto file2 = t.dir / "project/.vibepit/network.yaml";
  EXPECT_THROW(save_entries(file2, "allow-dns", {"example.com"}), NetworkFileError);
  EXPECT_THROW(read_network_file(file2), NetworkFileError);
  EXPECT_FALSE(std::filesystem::exists(t.dir / "outside/network.yaml"));
  EXPECT_FALSE(std::filesystem::exists(t.dir / "outside/network.yaml.tmp"));
}

TEST(NetworkFileSafety, MissingIsEmptyAndAFifoDoesNotHang) {
  Scratch s;
  const auto file = s.dir / "project/.vibepit/network.yaml";
  EXPECT_TRUE(read_network_file(file).allow_http.empty());  // neither file nor directory
  save_entries(file, "allow-dns", {"example.com"});         // creates both
  EXPECT_EQ(read_network_file(file).allow_dns, (std::vector<std::string>{"example.com"}));
  std::filesystem::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  EXPECT_THROW(read_network_file(file), NetworkFileError);  // not a regular file, at once
}
