"""Tests of the bargein command and the capacity planner it fronts."""
