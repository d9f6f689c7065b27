"""Tests of the benchmark harness (bench.harness), the shared speech sets (testdata) and benchmarks' arithmetic."""
