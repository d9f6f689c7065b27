"""Tests of the session shell (bargein.session) in process: replies, history, speculation, transcription, tools."""
