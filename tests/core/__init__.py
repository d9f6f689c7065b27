"""Tests of the pure turn core (bargein.session.core): scripted timelines in stream time, no engines, no clock."""
