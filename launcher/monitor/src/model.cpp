#include "vibepit/launcher/monitor/model.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace vibepit::launcher::monitor {
namespace {

using json = nlohmann::json;

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::uint64_t number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

// "2026-12-06T21:37:55.020445Z" as microseconds since the epoch; 0 when it is not that.
std::int64_t parse_ts(const std::string& ts) {
  int y, mo, d, h, mi, s;
  long us = 0;
  char frac[8] = {};
  if (std::sscanf(ts.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6[0-9]Z", &y, &mo, &d, &h, &mi, &s, frac) <
      6)
    return 0;
  us = std::strtol(frac, nullptr, 10);
  for (std::size_t n = std::char_traits<char>::length(frac); n < 6; ++n) us *= 10;
  // Days from the civil date (Howard Hinnant's algorithm, public domain).
  y -= mo <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const long yoe = y - era * 400;
  const long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const long days = era * 146097 + doe - 719468;
  return ((static_cast<std::int64_t>(days) * 86400 + h * 3600 + mi * 60 + s) * 1'000'000) + us;
}

}  // namespace

std::string_view to_string(Proto p) {
  switch (p) {
    case Proto::http:
      return "http";
    case Proto::connect:
      return "connect";
    case Proto::dns:
      return "dns";
  }
  return "http";
}

Row& Model::row(const Key& k) {
  auto it = rows_.find(k);
  if (it != rows_.end()) return it->second;
  if (rows_.size() >= kMaxRows) forget_oldest();
  Row& r = rows_[k];
  r.key = k;
  return r;
}

void Model::forget_oldest() {
  auto oldest = rows_.end();
  for (auto it = rows_.begin(); it != rows_.end(); ++it) {
    if (it->second.pending()) continue;
    if (oldest == rows_.end() || it->second.last_us < oldest->second.last_us) oldest = it;
  }
  if (oldest == rows_.end()) return;
  if (chosen_ && *chosen_ == oldest->first) chosen_.reset();
  rows_.erase(oldest);
}

void Model::unhold(std::uint64_t id) {
  ended_.insert(id);
  if (ended_.size() > kMaxEnded) ended_.erase(ended_.begin());
  auto it = held_by_id_.find(id);
  if (it == held_by_id_.end()) return;
  auto r = rows_.find(it->second.key);
  if (r != rows_.end()) r->second.held.erase(id);
  held_by_id_.erase(it);
}

void Model::mark_held(std::uint64_t id, const Held& h) {
  Row& r = row(h.key);
  if (r.held.empty() || h.since_us < r.held_since_us) r.held_since_us = h.since_us;
  r.held.insert(id);
  if (r.last_us == 0) r.last_us = h.since_us;
  held_by_id_[id] = h;
}

bool Model::on_line(std::string_view line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return true;
  if (auto end = j.find("end"); end != j.end() && end->is_boolean() && end->get<bool>()) {
    return false;
  }
  const std::string src = text(j, "src"), event = text(j, "event");
  if (src != "proxy" && src != "dns") return true;
  if (event != "decision" && event != "held") return true;  // close records add nothing here
  Key k;
  if (src == "dns") {
    k.proto = Proto::dns;
    k.host = text(j, "qname");
  } else {
    k.proto = text(j, "method") == "CONNECT" ? Proto::connect : Proto::http;
    k.host = text(j, "host");
    const auto port = number(j, "port");
    k.port = port <= 65535 ? static_cast<std::uint16_t>(port) : 0;
  }
  if (k.host.empty()) return true;
  const auto id = number(j, "id");
  const auto ts = parse_ts(text(j, "ts"));
  Row& r = row(k);
  if (const auto gen = number(j, "gen"); gen > status_.generation) status_.generation = gen;
  if (event == "held") {
    if (!ended_.count(id)) mark_held(id, {k, ts});
    return true;
  }
  if (!text(j, "hold").empty()) unhold(id);  // the outcome of a held request
  const auto n = std::max<std::uint64_t>(number(j, "count"), 1);
  r.count += n;
  r.last_us = std::max(r.last_us, ts);
  r.verdict = text(j, "verdict");
  r.reason = text(j, "reason");
  r.rule = text(j, "rule");
  (r.verdict == "allow" ? allowed_ : denied_) += n;
  if (const auto mode = text(j, "mode"); !mode.empty()) status_.mode = mode;
  return true;
}

void Model::set_pending(const std::vector<Pending>& pending, std::int64_t as_of_us) {
  std::map<std::uint64_t, Held> held;
  for (const auto& [id, h] : held_by_id_) {
    if (h.since_us >= as_of_us && as_of_us != 0) held[id] = h;  // newer than the list
  }
  for (const auto& p : pending) {
    if (!ended_.count(p.id)) held[p.id] = {{p.proto, p.host, p.port}, p.since_us};
  }
  for (auto& [k, r] : rows_) r.held.clear();
  held_by_id_.clear();
  for (const auto& [id, h] : held) mark_held(id, h);
}

std::vector<const Row*> Model::visible() const {
  std::vector<const Row*> out;
  for (const auto& [k, r] : rows_) {
    if (!r.pending() && r.verdict == "allow" && !show_allowed_) continue;
    if (!filter_.empty() && k.host.find(filter_) == std::string::npos) continue;
    out.push_back(&r);
  }
  std::stable_sort(out.begin(), out.end(), [](const Row* a, const Row* b) {
    if (a->pending() != b->pending()) return a->pending();
    if (a->pending()) return a->held_since_us > b->held_since_us;
    return a->last_us > b->last_us;
  });
  return out;
}

std::size_t Model::selected_index() const {
  const auto rows = visible();
  if (rows.empty()) return 0;
  if (chosen_) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i]->key == *chosen_) return i;
    }
  }
  return 0;  // the newest held row, which sorts first; or the newest row
}

const Row* Model::selected() const {
  const auto rows = visible();
  return rows.empty() ? nullptr : rows[selected_index()];
}

void Model::move(int delta) {
  const auto rows = visible();
  if (rows.empty()) return;
  const auto at = static_cast<long>(selected_index()) + delta;
  const auto last = static_cast<long>(rows.size()) - 1;
  chosen_ = rows[static_cast<std::size_t>(std::clamp(at, 0L, last))]->key;
}

std::size_t Model::held_count() const {
  return held_by_id_.size();
}

}  // namespace vibepit::launcher::monitor
