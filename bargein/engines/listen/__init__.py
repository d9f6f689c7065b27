"""Listen: voice activity detection (Silero VAD, batched across sessions)."""
