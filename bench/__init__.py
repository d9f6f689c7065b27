"""Benchmarks that print figures: run them as modules, e.g. ``python -m bench.llm_speed``."""
