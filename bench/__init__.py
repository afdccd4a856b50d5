"""Throughput benchmarks of every implementation against a memory-read floor, run with pytest-benchmark.

`python -m bench` runs the suite and reports; nothing here imports a framework at module level, so a
machine without one of them still benchmarks the others.
"""
