#pragma once
// One I/O thread of the appliance as the servers that run on it see it: its event loop and
// its own decision-log producer. The proxy server owns the threads and their loops; the DNS
// server runs its sockets on the same loops, so a query, like a connection, lives on one
// thread from receipt to reply and shares nothing mutable with the other threads.
#include <asio/io_context.hpp>

#include "vibepit/decision_log/decision_log.hpp"

namespace vibepit::runtime {

struct Loop {
  asio::io_context* io;
  decision_log::Producer* log;  // push only from this loop's thread
};

}  // namespace vibepit::runtime
