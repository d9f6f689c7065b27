"""Tests of bargein.engines shared by every stage: fairness, queues, refusals, resilience, batching, long inputs."""
