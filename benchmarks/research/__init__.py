"""One-off research scripts of the bundled model's learning (issue 14); see benchmarks/README.md."""
