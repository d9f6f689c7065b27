"""Tests of the VAD and end-of-turn models (bargein.engines.listen)."""
