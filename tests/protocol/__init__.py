"""Tests of the Realtime protocol's events (bargein.protocol) over a real socket: bad input, edges, beta fields."""
