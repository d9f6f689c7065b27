"""Tests of bargein.audio and the session's input stage: codecs, framing, resampling, noise reduction, crossfade."""
