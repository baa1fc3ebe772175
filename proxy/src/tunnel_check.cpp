#include "vibepit/proxy/tunnel_check.hpp"

#include <utility>

namespace vibepit::proxy {
namespace {

using policy::Reason;
using tls::HelloStatus;

// Fatal alerts (RFC 8446 6.2) in a TLS 1.2 record, which any client reads before the
// ServerHello: access_denied (49) and decode_error (50).
constexpr std::string_view kAccessDenied("\x15\x03\x03\x00\x02\x02\x31", 7);
constexpr std::string_view kDecodeError("\x15\x03\x03\x00\x02\x02\x32", 7);

}  // namespace

TunnelCheck::TunnelCheck(config::TunnelTls mode, std::string_view host,
                         std::chrono::milliseconds hello_timeout)
    : mode_(mode),
      step_(mode == config::TunnelTls::off ? Step::pass : Step::more),
      host_(host),
      hello_timeout_(hello_timeout) {}

TunnelCheck::State& TunnelCheck::state() {
  if (!state_) state_ = std::make_unique<State>();
  return *state_;
}

TunnelCheck::Step TunnelCheck::offer(std::string_view bytes) {
  if (step_ != Step::more || bytes.empty()) return step_;
  tls::HelloReader first;
  tls::HelloReader& reader = state_ ? state_->reader : first;
  reader.feed(bytes);
  judge(reader);
  if (step_ != Step::more) return step_;
  // Not whole yet: hold these bytes, and see that the rest does not dawdle.
  const auto now = clock::now();
  if (!state_) {
    state().reader = std::move(first);
    state_->first = now;
  } else if (now - state_->first > hello_timeout_) {
    refuse(Reason::bad_client_hello,
           "the ClientHello was not whole within " + std::to_string(hello_timeout_.count()) +
               " ms (header-timeout-ms)",
           kAccessDenied);
    return step_;
  }
  state_->held.append(bytes);
  return step_;
}

void TunnelCheck::judge(const tls::HelloReader& r) {
  const bool require = mode_ == config::TunnelTls::require;
  switch (r.status()) {
    case HelloStatus::need_more:
      return;
    case HelloStatus::not_tls:
      if (!require) {
        step_ = Step::pass;
      } else {
        refuse(Reason::not_tls,
               "the first bytes are not a TLS ClientHello, and tunnel-tls is \"require\"", {});
      }
      return;
    case HelloStatus::malformed:
      refuse(Reason::bad_client_hello, "a malformed TLS ClientHello: " + std::string(r.error()),
             kDecodeError);
      return;
    case HelloStatus::too_large:
      refuse(Reason::bad_client_hello,
             "a TLS ClientHello past the bounds: " + std::string(r.error()), kAccessDenied);
      return;
    case HelloStatus::complete:
      break;
  }
  if (!r.has_server_name()) {
    if (!require) {
      step_ = Step::pass;
    } else {
      refuse(Reason::no_sni, "the TLS ClientHello names no host, and tunnel-tls is \"require\"",
             kAccessDenied);
    }
  } else if (tls::same_name(r.server_name(), host_)) {
    step_ = Step::pass;
  } else {
    refuse(Reason::sni_mismatch,
           "the TLS ClientHello names " + tls::quoted_name(r.server_name()) +
               (r.has_ech() ? " (the outer name of an Encrypted ClientHello)" : "") +
               ", not the CONNECT host " + tls::quoted_name(host_),
           kAccessDenied);
  }
}

void TunnelCheck::refuse(Reason reason, std::string detail, std::string_view alert) {
  step_ = Step::refuse;
  reason_ = reason;
  alert_ = alert;
  State& st = state();
  std::string().swap(st.held);
  st.detail = std::move(detail);
}

void TunnelCheck::release_held() {
  state_.reset();  // passed: nothing of the check is needed any more
}

void TunnelCheck::fill(decision_log::DecisionRecord& rec) const {
  rec.verdict = policy::Verdict::deny;
  rec.would_deny = false;
  rec.reason = reason_;
  rec.rule.clear();  // the rule allowed the CONNECT; this is not its doing
  rec.detail = state_ ? state_->detail : std::string();
}

}  // namespace vibepit::proxy
