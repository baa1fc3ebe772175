#include "vibepit/decision_log/record_folder.hpp"

#include <string_view>
#include <utility>

namespace vibepit::decision_log {

RecordFolder::RecordFolder(std::uint32_t per_client, Emit emit)
    : per_client_(per_client), emit_(std::move(emit)) {}

RecordFolder::Entry& RecordFolder::entry(const policy::IpAddr& client, clock::time_point now) {
  flush(now);
  if (auto it = clients_.find(client); it != clients_.end()) return it->second;
  if (clients_.size() >= kMaxClients) return clients_[policy::IpAddr{client.v6, {}}];
  return clients_[client];
}

void RecordFolder::fold_into(Entry& e, DecisionRecord& rec) {
  if (e.folded++ == 0) {
    e.first = std::move(rec);
    ++folded_clients_;
  }
}

bool RecordFolder::admit(DecisionRecord& rec, const policy::IpAddr& client, clock::time_point now) {
  if (per_client_ == 0) return true;
  Entry& e = entry(client, now);
  if (e.whole < per_client_) {
    ++e.whole;
    return true;
  }
  fold_into(e, rec);
  return false;
}

void RecordFolder::fold(DecisionRecord& rec, const policy::IpAddr& client, clock::time_point now) {
  fold_into(entry(client, now), rec);
}

void RecordFolder::flush(clock::time_point now, bool force) {
  if (!force && now < due()) return;
  for (auto& [client, e] : clients_) {
    if (e.folded == 0) continue;
    DecisionRecord summary = std::move(e.first);
    summary.count = e.folded;
    summary.interval_ms = static_cast<std::uint32_t>(kInterval.count());
    emit_(std::move(summary));
  }
  clients_.clear();
  folded_clients_ = 0;
  interval_start_ = now;
}

}  // namespace vibepit::decision_log
