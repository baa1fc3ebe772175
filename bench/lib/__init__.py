"""What the benchmark suites (bench.suites) share: the namespaces and cores (topology), the
systems under test (peers for the proxy, dns for the DNS server), the load and what it
costs (workloads, cpu, memory, matcher), the statistics and verdicts (stats), and where
results go (report, proxy_tables). It builds on the integration tests' harness
(tests.integration.harness), which never imports it."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
