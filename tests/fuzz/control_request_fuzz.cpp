// libFuzzer target: the control API's request framing and routing, on bytes as a client
// sends them. Every framed request is answered by the real ControlApi (rule updater and
// snapshot store included) with a fake decision feed; invariants are checked with CHECK.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "vibepit/control/api.hpp"
#include "vibepit/policy/decision.hpp"

namespace {

using namespace vibepit;

class Feed : public control::DecisionFeed {
 public:
  std::vector<Entry> since(std::uint64_t after, std::size_t limit,
                           std::uint64_t& lost) const override {
    lost = after < 3 ? 3 - after : 0;
    std::vector<Entry> out;
    for (std::uint64_t s = std::max<std::uint64_t>(after, 3) + 1; s <= 9 && out.size() < limit;
         ++s) {
      out.push_back({s, "{\"id\":" + std::to_string(s) + "}\n"});
    }
    return out;
  }
  std::uint64_t last_seq() const override { return 9; }
};

class Stats : public control::StatsSource {
 public:
  std::string stats_json() const override { return "{}\n"; }
  std::string prometheus() const override { return "x 1\n"; }
};

// Ask mode's table: one held request, and the settings, changed as the API asks.
class Pending : public control::PendingSource {
 public:
  control::AskSettings settings{true, 60'000, 64, 1024};
  control::AskSettings ask() const override { return settings; }
  control::AskSettings set_ask(std::optional<bool> enabled,
                               std::optional<std::uint64_t> timeout_ms) override {
    if (enabled) settings.enabled = *enabled;
    if (timeout_ms) {
      CHECK(*timeout_ms >= 1 && *timeout_ms <= 86'400'000);  // the API checked it
      settings.timeout_ms = *timeout_ms;
    }
    return settings;
  }
  std::vector<control::PendingView> pending() const override {
    return {{7, "CONNECT", "a\x1b.test", 443, "172.31.0.3:1", 1, 2, 3}};
  }
  bool refuse(std::uint64_t id) override { return id == 7; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Feed feed;
  static Stats stats;
  static Pending pending;
  policy::SnapshotStore store(nullptr);
  control::RuleUpdater updater(store);
  control::ApiLimits limits;
  limits.max_head = 1024;
  limits.max_body = 4096;
  limits.max_entries = 16;
  control::ControlApi api(updater, store, feed, stats, limits, &pending);

  std::string_view buf(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 8 && !buf.empty(); ++i) {  // several pipelined requests
    control::ApiRequest req;
    auto f = control::frame_request(buf, limits, req);
    if (f.state == control::FrameState::incomplete) break;
    if (f.state == control::FrameState::error) {
      CHECK(f.status >= 400 && f.status < 600);
      CHECK(!f.error.empty());
      auto wire = control::serialize(control::error_response(f.status, f.error), false);
      CHECK(wire.rfind("HTTP/1.1 ", 0) == 0);
      break;
    }
    CHECK(f.consumed > 0 && f.consumed <= buf.size());
    CHECK(req.body.size() <= limits.max_body);
    auto before = store.generation();
    auto resp = api.handle(req);
    CHECK(resp.status >= 200 && resp.status < 600);
    if (!resp.follow) {
      // Every answer is JSON, except the metrics text.
      if (req.path != "/metrics") {
        auto j = nlohmann::json::parse(resp.body, nullptr, false);
        CHECK(!j.is_discarded());
        if (resp.status >= 400) CHECK(j.contains("error"));
      }
    }
    // Only a successful POST may publish, and then by exactly one generation.
    auto after = store.generation();
    CHECK(after == before || (resp.status == 200 && req.method == "POST" && after == before + 1));
    if (after != before) {
      auto snap = store.current();
      CHECK(snap->generation == after);
    }
    buf.remove_prefix(f.consumed);
  }
  return 0;
}
