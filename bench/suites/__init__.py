"""The benchmark suites, each a thin main over bench.lib: run one from the repository root
as python3 -m bench.suites.NAME (--help says what it measures)."""
