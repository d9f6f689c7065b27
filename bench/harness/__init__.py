"""Shared pieces of the benchmarks: a server process, a real-time microphone, what a client observes, clip sets."""
