"""Tests of the language-model engines (bargein.engines.think): llama.cpp, the OpenAI-compatible one, tool calls."""
