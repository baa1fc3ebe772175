"""vibepit's benchmarks: run each from the repository root as python3 -m bench.NAME."""
