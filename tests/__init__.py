"""vibepit's Python tests: run each from the repository root, python3 -m tests.integration.test_NAME."""
