"""Benchmarks of how long things take: first audio, the stages of a turn, model speed, IPC overheads."""
