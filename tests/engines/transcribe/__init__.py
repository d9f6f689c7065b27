"""Tests of the speech recognisers (bargein.engines.transcribe)."""
