"""Tests of the built-in tools (bargein.tools): calculator, units, clock, grounding, input bounds."""
