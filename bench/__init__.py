"""vibepit's benchmarks: bench.suites holds what runs (python3 -m bench.suites.NAME from the
repository root), bench.lib what the suites share, load/ and micro/ the C++ load generator
and microbenchmarks."""
