"""Tests of bargein.metrics: the per-turn ledger, /metrics and traces."""
