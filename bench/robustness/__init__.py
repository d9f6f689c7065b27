"""Benchmarks of what breaks under abuse and time: hostile clients, soak, graceful drain."""
