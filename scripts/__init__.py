"""The project's Python tools: run each from the repository root, python3 -m scripts.NAME."""
