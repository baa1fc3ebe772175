"""Waiting on a condition instead of on the clock (docs/testing.md, "Rules for tests").

A test never sleeps and then asserts, and never bounds how long something took by a
fraction of a second: two builds sharing two cores stretch every step. It polls for the
outcome it expects, and gives up only after a bound that just a hang exceeds:

- LIVENESS_S: for "this must eventually happen" (a record is written, a client is served
  again, a process exits);
- deadline + DEADLINE_SLACK_S: where the product has a deadline of its own to honour (a
  header, idle or drain timeout), the test checks it was enforced by then: a deadline that
  never fires still fails the test, a slow machine does not.
"""

import time

LIVENESS_S = 10.0
DEADLINE_SLACK_S = 5.0
POLL_S = 0.05


def poll(fn, done, timeout=LIVENESS_S, interval=POLL_S):
    """Call fn() until done(value) holds or `timeout` seconds pass; return the last value.
    The caller asserts on it, so a failure message can show what was seen last."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if done(value) or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(probe, timeout=LIVENESS_S, interval=POLL_S):
    """probe()'s first truthy value, or its last (falsy) one after `timeout` seconds."""
    return poll(probe, bool, timeout=timeout, interval=interval)


def within(deadline_s):
    """How long a test waits for the product to act on a deadline of deadline_s seconds."""
    return deadline_s + DEADLINE_SLACK_S
