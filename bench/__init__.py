"""Benchmarks: `python -m bench` prints medians of repeated runs (`make bench`)."""
