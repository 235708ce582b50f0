"""Benchmarks (never run in CI). ``python -m benchmarks`` lists and runs them."""
