#pragma once
// The SNI check (config key tunnel-tls): what a CONNECT tunnel's client sends first is
// offered here, chunk by chunk, before any of it reaches upstream. A TLS ClientHello must
// name the CONNECT host (as DNS names compare); with "require", the first bytes must also
// be a ClientHello and name a host. The check holds what it has not judged yet, within the
// ClientHello reader's bounds (tls/client_hello.hpp), and the rest of it within the header
// time-out once the first byte came.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/record.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/tls/client_hello.hpp"

namespace vibepit::proxy {

class TunnelCheck {
 public:
  using clock = std::chrono::steady_clock;
  enum class Step {
    more,    // not judged yet: the bytes are held (held()); read on
    pass,    // send held() and then these bytes; the check is over
    refuse,  // send alert() to the client, when not empty, and close the tunnel
  };

  // `host` is the CONNECT host (normalised name or IP text); it must outlive the check.
  TunnelCheck(config::TunnelTls mode, std::string_view host,
              std::chrono::milliseconds hello_timeout);

  // The client's next bytes. Once the step is other than more, it stays.
  Step offer(std::string_view bytes);
  bool pending() const { return step_ == Step::more; }
  bool refused() const { return step_ == Step::refuse; }
  std::string_view held() const { return state_ ? std::string_view(state_->held) : ""; }
  void release_held();  // after a pass, once held() was sent

  // For a refusal: a fatal TLS alert record for a client that spoke TLS (else empty),
  // and the reason and detail of the deny record.
  std::string_view alert() const { return alert_; }
  policy::Reason reason() const { return reason_; }
  void fill(decision_log::DecisionRecord& rec) const;

 private:
  // What a check keeps past one offer: only a ClientHello split over reads, or a refusal,
  // needs it. The usual ClientHello, whole in the first read, is judged on the stack, and a
  // tunnel's frame carries no more than the pointer.
  struct State {
    tls::HelloReader reader;
    std::string held;
    clock::time_point first;
    std::string detail;
  };
  void judge(const tls::HelloReader& r);
  void refuse(policy::Reason reason, std::string detail, std::string_view alert);
  State& state();

  config::TunnelTls mode_;
  Step step_;
  policy::Reason reason_ = policy::Reason::allowlisted;
  std::string_view host_;
  std::chrono::milliseconds hello_timeout_;
  std::string_view alert_;
  std::unique_ptr<State> state_;
};

}  // namespace vibepit::proxy
