"""Integration tests: real vibepit-proxy processes in network namespaces (README.md)."""
