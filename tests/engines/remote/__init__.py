"""Tests of the Ray Serve engine clients (bargein.engines.remote) with fake handles."""
