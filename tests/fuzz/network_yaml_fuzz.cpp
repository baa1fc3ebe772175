// libFuzzer target: .vibepit/network.yaml, read and edited in place. An edit either keeps
// every entry the file had and adds the new ones, or the text is not a valid file.
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "vibepit/launcher/rules/network_file.hpp"

using namespace vibepit::launcher;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  NetworkFile before;
  try {
    before = parse_network_yaml(text, "fuzz");
  } catch (const NetworkFileError&) {
    return 0;
  }
  std::vector<std::string> appended;
  std::string out;
  try {
    out = add_to_network_yaml(text, "allow-http", {"*.fuzz.test:443", "a.test:80"}, appended);
  } catch (const NetworkFileError&) {
    CHECK(false);  // a file that parsed can always be edited
  }
  auto after = parse_network_yaml(out, "fuzz");
  CHECK(after.allow_dns == before.allow_dns);
  CHECK(after.presets == before.presets);
  CHECK(after.allow_http.size() == before.allow_http.size() + appended.size());
  for (std::size_t i = 0; i < before.allow_http.size(); ++i) {
    CHECK(after.allow_http[i] == before.allow_http[i]);
  }
  return 0;
}
