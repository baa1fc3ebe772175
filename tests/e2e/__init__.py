"""End-to-end tests: vibepit run and ci against a real Docker engine (README.md)."""
