"""Measurement scripts. Run them from the repository root as modules: `python -m benchmarks.NAME`
(index: benchmarks/README.md)."""
