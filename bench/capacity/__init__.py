"""Benchmarks of how many sessions at once: the capacity ladder, stage costs, engines asked together."""
