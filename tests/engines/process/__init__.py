"""Tests of engines in supervised worker processes (bargein.engines.process)."""
