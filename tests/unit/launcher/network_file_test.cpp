#include "vibepit/launcher/network_file.hpp"

#include <gtest/gtest.h>

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
