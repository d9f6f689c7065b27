"""Tests of the language table (bargein.languages) and how languages are refused or heard."""
