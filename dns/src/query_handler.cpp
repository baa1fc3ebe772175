#include "query_handler.hpp"

#include "vibepit/runtime/endpoint.hpp"

#include <ares.h>

#include <algorithm>
#include <cstring>

namespace vibepit::dns {
namespace {

using clock = std::chrono::steady_clock;

// The longest label of a plain name in text form.
std::size_t longest_label(std::string_view name) {
  std::size_t best = 0, run = 0;
  for (char c : name) {
    run = c == '.' ? 0 : run + 1;
    best = std::max(best, run);
  }
  return best;
}

}  // namespace

bool RateLimiter::allow(const asio::ip::address& client, clock::time_point now) {
  if (qps_ == 0) return true;
  const policy::IpAddr key = runtime::to_ip_addr(client);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxClients) {
      // Forget clients that have been quiet long enough to have refilled their bucket; if
      // none has, start over: a flood of addresses must not grow memory.
      auto refill = std::chrono::duration<double>(static_cast<double>(burst_) / qps_);
      std::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.last() > refill; });
      if (buckets_.size() >= kMaxClients) buckets_.clear();
    }
    it = buckets_.emplace(key, runtime::TokenBucket(burst_, now)).first;
  }
  return it->second.take(qps_, burst_, now);
}

struct QueryHandler::Forward {
  QueryHandler* handler = nullptr;
  std::vector<std::uint8_t> pkt;  // the client's query, for its ID and question bytes
  Query q;
  decision_log::DecisionRecord rec;
  ReplyTo to;
};

QueryHandler::QueryHandler(asio::io_context& io, const config::DnsConfig& cfg,
                           policy::SnapshotStore& store, decision_log::DecisionLog::Producer& log,
                           SharedCache& cache, Replier& replier)
    : cfg_(cfg),
      store_(store),
      cache_(cache),
      replier_(replier),
      limiter_(cfg.client_qps, cfg.client_burst),
      log_(io, log, cfg.log_per_client),
      tcp_upstream_(io, cfg.upstream,
                    runtime::AresOptions{.timeout = cfg.timeout,
                                         .tcp = true,
                                         .ignore_truncation = false,
                                         .any_rcode = true,
                                         .edns_payload = cfg.udp_payload}),
      udp_forward_(io, cfg.upstream,
                   UdpUpstream::Options{.timeout = cfg.timeout, .max_pending = cfg.max_pending},
                   &QueryHandler::on_udp_upstream) {
  for (auto t : cfg.qtypes) qtypes_.add(t);
  spare_forwards_.reserve(kSpareForwards);
}

QueryHandler::~QueryHandler() = default;

void QueryHandler::batch_upstream_answers(int udp_fd) {
  udp_forward_.set_batch_hooks([this, udp_fd] { replier_.begin_batch(udp_fd); },
                               [this] { replier_.flush_batch(); });
}

void QueryHandler::stop() {
  stopped_ = true;
  log_.flush();  // the last summaries
}

decision_log::DecisionRecord QueryHandler::make_record(const Query& q,
                                                       const asio::ip::address& client,
                                                       std::uint16_t port, Transport t) {
  decision_log::DecisionRecord rec;
  rec.id = log_.next_id();
  rec.ts_us = decision_log::now_us();
  rec.src = "dns";
  // Text is made by the log's writer thread, off this path.
  rec.client_ip = runtime::to_ip_addr(client);
  rec.client_port = port;
  log_.reuse_buffers(rec);
  rec.host.assign(q.qname.view());
  rec.qtype = q.qtype;
  rec.transport = t == Transport::udp ? "udp" : "tcp";
  return rec;
}

void QueryHandler::emit(decision_log::DecisionRecord& rec, Rcode rc) {
  rec.rcode = to_string(rc).data();  // a view of a string literal: NUL-terminated
  rec.elapsed_us =
      static_cast<std::uint32_t>(std::max<std::int64_t>(decision_log::now_us() - rec.ts_us, 1));
  // Over-limit queries are folded whatever the budget; other denials past it.
  const policy::IpAddr client = rec.client_ip;
  if (rec.reason == policy::Reason::rate_limited) {
    log_.fold(std::move(rec), client, now_);
  } else {
    log_.write(std::move(rec), client, now_);
  }
}

std::size_t QueryHandler::reply_limit(const Query& q, Transport t) const {
  return t == Transport::tcp ? 65'535 : udp_reply_limit(q, cfg_.udp_payload);
}

void QueryHandler::reply_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rc,
                               decision_log::DecisionRecord& rec, const ReplyTo& to) {
  auto n = build_error(pkt, q, rc, cfg_.udp_payload, wbuf_);
  emit(rec, rc);
  if (n) replier_.deliver(to, std::span<const std::uint8_t>(wbuf_.data(), n));
}

bool QueryHandler::handle(std::span<const std::uint8_t> pkt, const asio::ip::address& client,
                          std::uint16_t client_port, ReplyTo to) {
  const Transport t = to.transport;
  Query q;
  auto err = parse_query(pkt, q);
  // Runts and responses get no answer: answering responses invites reflection loops.
  if (err == WireError::short_header || err == WireError::is_response) return false;
  const auto now = now_ = clock::now();
  auto rec = make_record(q, client, client_port, t);
  // One snapshot for the whole decision; every record, refusals included, names its
  // generation and mode.
  auto snap = store_.current();
  rec.gen = snap->generation;
  rec.mode = snap->rules.mode;
  if (!limiter_.allow(client, now)) {
    rec.reason = policy::Reason::rate_limited;
    rec.detail.set_literal("client over dns-client-qps");
    reply_error(pkt, q, Rcode::refused, rec, to);
    return true;
  }
  if (err != WireError::none) {
    rec.reason = policy::Reason::invalid_target;
    rec.detail = std::string("malformed query: ") + std::string(to_string(err));
    reply_error(pkt, q, err == WireError::bad_opcode ? Rcode::notimp : Rcode::formerr, rec, to);
    return true;
  }
  if (q.qname.len > cfg_.max_qname || longest_label(q.qname.view()) > cfg_.max_label) {
    rec.reason = policy::Reason::invalid_target;
    rec.detail.set_literal("name longer than dns-max-qname or a label longer than dns-max-label");
    reply_error(pkt, q, deny_rcode(), rec, to);
    return true;
  }
  // Policy first, always: a cached answer never outlives the rule that let it in.
  const policy::TenantId tenant = config::dns_tenant(cfg_, rec.client_ip);
  if (const auto* who = policy::tenant_of(*snap, tenant)) rec.tenant = who->name;
  auto verdict = check_query(q, *snap, qtypes_, tenant);
  rec.reason = verdict.reason;
  rec.would_deny = verdict.would_deny;
  rec.rule = verdict.rule;
  // Allowed queries need no explanation; denials say why.
  if (verdict.action != QueryAction::forward) rec.detail.set_literal(verdict.detail);
  switch (verdict.action) {
    case QueryAction::deny:
    case QueryAction::deny_qtype:
      reply_error(pkt, q, deny_rcode(), rec, to);
      return true;
    case QueryAction::notimp:
      reply_error(pkt, q, Rcode::notimp, rec, to);
      return true;
    case QueryAction::any_hinfo: {
      rec.verdict = policy::Verdict::allow;
      auto n = build_any_hinfo(pkt, q, 3600, cfg_.udp_payload, wbuf_);
      emit(rec, Rcode::noerror);
      if (n) replier_.deliver(to, std::span<const std::uint8_t>(wbuf_.data(), n));
      return true;
    }
    case QueryAction::forward:
      break;
  }
  auto hit = cache_.lookup(pkt, q, now, reply_limit(q, t), cfg_.udp_payload, wbuf_, hit_addrs_);
  if (hit.size) {
    rec.cached = true;
    rec.addrs.assign(hit_addrs_.begin(), hit_addrs_.end());  // into a reused buffer
    auto answer = check_answer(hit_addrs_, *snap);
    if (!answer.allowed) {
      rec.reason = policy::Reason::blocked_address;
      rec.range = answer.range;
      rec.detail = "answer holds " + answer.addr.to_string();
      reply_error(pkt, q, deny_rcode(), rec, to);
      return true;
    }
    rec.verdict = policy::Verdict::allow;
    emit(rec, hit.rcode);
    replier_.deliver(to, std::span<const std::uint8_t>(wbuf_.data(), hit.size));
    return true;
  }
  if (pending_ >= cfg_.max_pending) {
    rec.reason = policy::Reason::overloaded;
    rec.detail.set_literal("dns-max-pending upstream queries in flight");
    reply_error(pkt, q, Rcode::servfail, rec, to);
    return true;
  }
  forward(pkt, q, std::move(rec), std::move(to));
  return true;
}

void QueryHandler::forward(std::span<const std::uint8_t> pkt, const Query& q,
                           decision_log::DecisionRecord rec, ReplyTo to) {
  auto n = build_upstream_query(pkt, q, cfg_.udp_payload, qbuf_);
  if (n == 0) {
    rec.reason = policy::Reason::invalid_target;
    rec.detail.set_literal("query too large to forward");
    reply_error(pkt, q, Rcode::servfail, rec, to);
    return;
  }
  Forward* f = take_forward().release();  // owned by the upstream until it completes
  f->pkt.assign(pkt.begin(), pkt.end());
  f->q = q;
  f->rec = std::move(rec);
  f->to = std::move(to);
  if (f->to.transport == Transport::udp) {
    // The question as sent: our header, then the client's question bytes.
    const std::size_t question_end = kHeaderSize + (q.question_end - q.question_begin);
    if (!udp_forward_.send(std::span<const std::uint8_t>(qbuf_.data(), n), question_end, f)) {
      std::unique_ptr<Forward> gone(f);
      gone->rec.reason = policy::Reason::resolve_failed;
      gone->rec.detail.set_literal("upstream: no server to ask, or every query ID in use");
      reply_error(gone->pkt, gone->q, Rcode::servfail, gone->rec, gone->to);
      give_back(std::move(gone));
      return;
    }
    ++pending_;
    return;
  }
  ++pending_;
  ares_send(tcp_upstream_.get(), qbuf_.data(), static_cast<int>(n), &QueryHandler::on_upstream, f);
  tcp_upstream_.rearm_timer();
}

void QueryHandler::on_udp_upstream(void* arg, UpstreamStatus status,
                                   std::span<const std::uint8_t> answer) {
  std::unique_ptr<Forward> f(static_cast<Forward*>(arg));
  // `stopped`: the handler is going away; nothing may be touched.
  if (status == UpstreamStatus::stopped) return;
  QueryHandler& h = *f->handler;
  --h.pending_;
  if (h.stopped_) return;  // after stop() the sockets are gone
  h.finish_forward(*f, status == UpstreamStatus::answer ? nullptr : to_string(status), answer);
  h.give_back(std::move(f));
}

void QueryHandler::on_upstream(void* arg, int status, int /*timeouts*/, unsigned char* abuf,
                               int alen) {
  std::unique_ptr<Forward> f(static_cast<Forward*>(arg));
  // On ARES_EDESTRUCTION the handler is going away: nothing may be touched. Otherwise c-ares
  // calls from its channel's handlers on this loop, while the handler exists.
  if (status == ARES_EDESTRUCTION) return;
  QueryHandler& h = *f->handler;
  --h.pending_;
  if (h.stopped_) return;  // after stop() the sockets are gone
  std::span<const std::uint8_t> answer;
  if (abuf && alen > 0) answer = {abuf, static_cast<std::size_t>(alen)};
  h.finish_forward(*f, status == ARES_SUCCESS ? nullptr : ares_strerror(status), answer);
  h.give_back(std::move(f));
}

std::unique_ptr<QueryHandler::Forward> QueryHandler::take_forward() {
  if (spare_forwards_.empty()) {
    auto f = std::make_unique<Forward>();
    f->handler = this;
    return f;
  }
  auto f = std::move(spare_forwards_.back());
  spare_forwards_.pop_back();
  return f;
}

void QueryHandler::give_back(std::unique_ptr<Forward> f) {
  // A TCP client's connection goes now. The record needs no reset: every path has moved
  // it into the log, and the next query's record is moved over it.
  f->to = ReplyTo{};
  if (spare_forwards_.size() < kSpareForwards && f->pkt.capacity() <= kSparePacketMax) {
    spare_forwards_.push_back(std::move(f));
  }
}

void QueryHandler::finish_forward(Forward& f, const char* failure,
                                  std::span<const std::uint8_t> answer) {
  now_ = clock::now();
  auto& rec = f.rec;
  if (failure || answer.empty()) {
    // Fail closed: no answer is better than a guess.
    rec.reason = policy::Reason::resolve_failed;
    rec.detail = std::string("upstream: ") + (failure ? failure : "empty answer");
    reply_error(f.pkt, f.q, Rcode::servfail, rec, f.to);
    return;
  }
  thread_local ResponseInfo info;
  auto err = parse_response(answer, f.q, info);
  if (err != WireError::none) {
    rec.reason = policy::Reason::resolve_failed;
    rec.detail = std::string("upstream answer rejected: ") + std::string(to_string(err));
    reply_error(f.pkt, f.q, Rcode::servfail, rec, f.to);
    return;
  }
  rec.addrs.assign(info.addrs.begin(), info.addrs.end());  // into a reused buffer
  // Judge the answer with the rules in force now.
  auto snap = store_.current();
  rec.gen = snap->generation;
  rec.mode = snap->rules.mode;
  auto verdict = check_answer(info.addrs, *snap);
  if (!verdict.allowed) {
    rec.reason = policy::Reason::blocked_address;
    rec.range = verdict.range;
    rec.detail = "answer holds " + verdict.addr.to_string();
    reply_error(f.pkt, f.q, deny_rcode(), rec, f.to);
    return;
  }
  cache_.insert(f.q, answer, info, clock::now());
  auto n = build_reply_from_upstream(answer, info, f.pkt, f.q, reply_limit(f.q, f.to.transport),
                                     cfg_.udp_payload, wbuf_);
  if (n == 0) {
    rec.reason = policy::Reason::resolve_failed;
    rec.detail.set_literal("upstream answer too large");
    reply_error(f.pkt, f.q, Rcode::servfail, rec, f.to);
    return;
  }
  rec.verdict = policy::Verdict::allow;  // the reason is the query's: allowlisted, or audit's
  emit(rec, info.rcode);
  replier_.deliver(f.to, std::span<const std::uint8_t>(wbuf_.data(), n));
}

}  // namespace vibepit::dns
