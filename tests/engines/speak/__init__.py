"""Tests of the speech synthesisers and their clause feed (bargein.engines.speak)."""
