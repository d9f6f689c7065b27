"""What an engine can do is declared (``capabilities``), and the wrappers pass the declaration and the members on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence

import numpy as np

from bargein.engines.base import ASRCapabilities, LanguageModel, LLMCapabilities, TTSCapabilities
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.health import StageHealth
from bargein.engines.resilience import ResilientLanguageModel, ResilientRecognizer
from bargein.engines.resilient_speech import ResilientSynthesizer
from bargein.engines.speak.by_language import LanguageRouter
from bargein.engines.stage_calls import Deadlines
from bargein.engines.think.tool_calls import reply_pieces
from bargein.engines.transcribe.by_language import RecognizerRouter
from bargein.values import CancelToken, ChatMessage, Float32Audio, GenerationOptions, ReplyPiece, ToolCall, Transcript

SPEECH = 0.3 * np.sin(np.arange(16_000, dtype=np.float32) / 4)
WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


class QuickPartials(FakeRecognizer):
    """A recogniser with a quick partial path of its own, recording the keys it was given."""

    def __init__(self) -> None:
        super().__init__(("quick",), languages=frozenset({"en", "fr"}))
        self.partial_keys: list[Hashable | None] = []

    @property
    def capabilities(self) -> ASRCapabilities:
        return ASRCapabilities(partial=True, languages=self.languages)

    async def transcribe_partial(self, audio: Float32Audio, *, language: str | None = None,
                                 prompt: str | None = None, key: Hashable | None = None) -> Transcript:
        self.partial_keys.append(key)
        return Transcript("partial")


class Prefilling(FakeLanguageModel):
    """A fake model that can prefill, with a queue and a count of non-finite samplings."""

    def __init__(self) -> None:
        super().__init__()
        self.prefilled: list[list[ChatMessage]] = []

    @property
    def capabilities(self) -> LLMCapabilities:
        return LLMCapabilities(tools=True, prefill=True)

    @property
    def queue_depth(self) -> int:
        return 2

    @property
    def nonfinite_fallbacks(self) -> int:
        return 5

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        self.prefilled.append(list(messages))


class TextOnly(LanguageModel):
    """A model that cannot be offered tools: it only streams text."""

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        yield "just words"


class NamedVoices(FakeSynthesizer):
    """A fake voice with names of its own; other spellings fall back to ``b``."""

    @property
    def capabilities(self) -> TTSCapabilities:
        return TTSCapabilities(voices=("a", "b"), default_voice="b", voice_spellings=("x_a",))

    def resolve_voice(self, voice: str | None) -> str | None:
        return "a" if voice in ("a", "x_a") else "b"


def test_an_engine_that_declares_nothing_has_the_defaults() -> None:
    assert FakeRecognizer().capabilities == ASRCapabilities()
    assert TextOnly().capabilities == LLMCapabilities() and TextOnly().queue_depth is None
    assert FakeSynthesizer().capabilities.voices is None and FakeSynthesizer().resolve_voice("a") is None
    assert FakeSynthesizer().worker is None


async def test_a_recogniser_without_a_partial_path_recognises_the_clip_as_a_final() -> None:
    asr = FakeRecognizer(("hello there",))
    assert (await asr.transcribe_partial(SPEECH, key="session")).text == "hello there"
    guarded = ResilientRecognizer(asr, StageHealth("asr"), Deadlines())
    assert (await guarded.transcribe_partial(SPEECH, key="session")).text == "hello there"
    assert asr.calls == 2 and guarded.health.state == "ok"


async def test_the_resilient_recogniser_passes_its_inners_partial_path_and_languages_on() -> None:
    inner = QuickPartials()
    asr = ResilientRecognizer(inner, StageHealth("asr"), Deadlines())
    assert asr.capabilities == ASRCapabilities(partial=True, languages=frozenset({"en", "fr"}))
    assert (await asr.transcribe_partial(SPEECH, key="session")).text == "partial"
    assert inner.partial_keys == ["session"] and inner.calls == 0


async def test_the_resilient_model_passes_prefill_and_its_counters_on() -> None:
    inner = Prefilling()
    llm = ResilientLanguageModel(inner, StageHealth("llm"), Deadlines())
    assert llm.capabilities.prefill and llm.queue_depth == 2 and llm.nonfinite_fallbacks == 5
    llm.prefill([ChatMessage("user", "hi")])
    assert inner.prefilled == [[ChatMessage("user", "hi")]]


async def test_tools_are_offered_only_to_a_model_that_declares_them() -> None:
    options = GenerationOptions(tools=(WEATHER_TOOL,))
    asked = [ChatMessage("user", "what is the weather")]
    caller = FakeLanguageModel(calls={"weather": ("get_weather", "{}")})
    pieces: list[ReplyPiece] = [piece async for piece in reply_pieces(caller, asked, cancel=CancelToken(),
                                                                       options=options)]
    assert any(isinstance(piece, ToolCall) for piece in pieces)
    plain = [piece async for piece in reply_pieces(TextOnly(), asked, cancel=CancelToken(), options=options)]
    assert plain == ["just words"]


def test_the_routers_and_the_resilient_voice_declare_their_inner_engines_abilities() -> None:
    router = RecognizerRouter(FakeRecognizer(languages=frozenset({"en"})),
                              FakeRecognizer(languages=frozenset({"zh", "fr"})))
    assert router.capabilities.languages == frozenset({"en", "zh", "fr"}) and not router.capabilities.partial
    voices = LanguageRouter(NamedVoices(), FakeSynthesizer())
    assert voices.capabilities.voices == ("a", "b") and voices.resolve_voice("x_a") == "a"
    resilient = ResilientSynthesizer(NamedVoices(), None, StageHealth("tts"), Deadlines())
    assert resilient.capabilities.default_voice == "b" and resilient.resolve_voice("nobody") == "b"
