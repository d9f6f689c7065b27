"""Tests of the server layer (bargein.server): auth, client secrets, limits, drain, workers, metrics totals."""
