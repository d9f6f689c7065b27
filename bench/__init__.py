"""Benchmarks that print figures, grouped by the question they answer; run them as modules.

``bench.latency`` (how long), ``bench.quality`` (how well), ``bench.capacity`` (how many at once),
``bench.robustness`` (what breaks), all over the shared ``bench.harness``; e.g.
``python -m bench.latency.first_audio``. bench/README.md lists every benchmark.
"""
