"""Transcribe: speech recognition (Whisper in CTranslate2 form), its pinned models and a WER metric."""
