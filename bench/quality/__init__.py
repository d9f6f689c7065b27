"""Benchmarks of how well the agent listens, hears and answers: turn quality, endpoints, recognition, replies."""
