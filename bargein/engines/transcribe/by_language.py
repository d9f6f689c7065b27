"""Two recognisers behind one: English to the English-only model, every other language to the multilingual one."""

from __future__ import annotations

from bargein.engines.base import ASRCapabilities, SpeechRecognizer
from bargein.languages import language_code
from bargein.values import Float32Audio, Transcript


class RecognizerRouter(SpeechRecognizer):
    """A :class:`~bargein.engines.base.SpeechRecognizer` that keeps English sessions on the small
    English-only Whisper (tiny.en: faster, and what they had before Mandarin was enabled) and sends
    every other language to the multilingual one. A session that names no language goes to
    ``unset``'s model: English on an English-first server, and with ``unset=None`` the multilingual
    model, which detects the language.
    """

    def __init__(self, english: SpeechRecognizer, multilingual: SpeechRecognizer, *,
                 unset: str | None = "en") -> None:
        self.english = english
        self.multilingual = multilingual
        self.unset = unset
        known = multilingual.capabilities.languages
        self.languages = None if known is None else known | {"en"}

    @property
    def capabilities(self) -> ASRCapabilities:
        """Both models' languages; a partial recognition is a final one (the router has no quick path)."""
        return ASRCapabilities(languages=self.languages)

    def recognizer_for(self, language: str | None) -> SpeechRecognizer:
        """The model that transcribes ``language``."""
        code = language_code(language) or self.unset
        return self.english if code == "en" else self.multilingual

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a clip with the model for ``language``."""
        engine = self.recognizer_for(language)
        if engine is self.english and language is None:
            language = "en"
        return await engine.transcribe(audio, language=language, prompt=prompt)

    @property
    def queue_depth(self) -> int:
        """Recognitions waiting in either model."""
        return (self.english.queue_depth or 0) + (self.multilingual.queue_depth or 0)

    async def aclose(self) -> None:
        """Close both models."""
        for engine in (self.english, self.multilingual):
            await engine.aclose()
