"""Engine edge cases a production voice server meets: prompts that overflow the context, and the like.

Everything here runs on small fakes and pure functions: no model is loaded.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bargein.engines.think.llama_context import LlamaPrompt, PromptTooLong
from bargein.engines.think.tool_calls import ToolCallSplitter
from bargein.engines.transcribe.whisper_decode import WhisperCore
from bargein.values import LISTEN_SAMPLE_RATE, ChatMessage, GenerationOptions, ReplyPiece, ToolCall


class FakeLlama:
    """Just enough of ``llama_cpp.Llama`` for :class:`LlamaPrompt`: a reversible tokenizer of four bytes a
    token (about what a real one gives English text), with the fallback ChatML template."""

    def __init__(self, n_ctx: int) -> None:
        self.metadata: dict[str, str] = {}
        self._n_ctx = n_ctx
        self._ids: dict[bytes, int] = {}
        self._pieces: dict[int, bytes] = {1: b"<s>", 2: b"</s>"}

    def n_ctx(self) -> int:
        return self._n_ctx

    def token_eos(self) -> int:
        return 2

    def token_bos(self) -> int:
        return 1

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        tokens = [1] if add_bos else []
        for start in range(0, len(text), 4):
            piece = text[start:start + 4]
            if piece not in self._ids:
                self._ids[piece] = len(self._pieces) + 10
                self._pieces[self._ids[piece]] = piece
            tokens.append(self._ids[piece])
        return tokens

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        return b"".join(self._pieces[token] for token in tokens if special or token > 2)


def _prompt(n_ctx: int = 1024) -> tuple[FakeLlama, LlamaPrompt]:
    llama = FakeLlama(n_ctx)
    return llama, LlamaPrompt(llama, "You are a helpful voice assistant.")


def _text(llama: FakeLlama, tokens: list[int]) -> str:
    return llama.detokenize(tokens, special=True).decode("utf-8", "replace")


def test_a_newest_message_longer_than_the_context_is_shortened_not_refused() -> None:
    llama, prompt = _prompt()
    history = [ChatMessage("user", "What is the news?"), ChatMessage("assistant", "Let me look."),
               ChatMessage("user", "START " + "news " * 2000 + "so what do you think?")]
    options = GenerationOptions(max_tokens=256)
    tokens = prompt.fit(history, options)
    assert len(tokens) <= 1024 - 256  # the reply keeps the room it asked for
    text = _text(llama, tokens)
    assert "START" in text and "so what do you think?" in text  # its start and its end survive
    assert "helpful voice assistant" in text  # and so do the instructions


def test_a_long_tool_output_keeps_its_call_id_and_fits() -> None:
    llama, prompt = _prompt(512)
    call = ToolCall(name="search", call_id="call_1", arguments="{}")
    history = [ChatMessage("user", "Search it."), ChatMessage("assistant", "", tool_calls=(call,)),
               ChatMessage("tool", '{"results": [' + '"x", ' * 3000 + '"end"]}', tool_call_id="call_1")]
    tokens = prompt.fit(history, GenerationOptions(max_tokens=128))
    assert len(tokens) <= 512 - 128
    assert "The search tool answered" in _text(llama, tokens)  # still known as the search tool's output


def test_long_instructions_are_shortened_when_truncation_is_on_and_refused_when_off() -> None:
    llama, prompt = _prompt()
    history = [ChatMessage("system", "RULES " + "be kind. " * 1500 + "END OF RULES"), ChatMessage("user", "Hi!")]
    tokens = prompt.fit(history, GenerationOptions(max_tokens=256))
    assert len(tokens) <= 1024 - 256
    assert "Hi!" in _text(llama, tokens)
    with pytest.raises(PromptTooLong):
        prompt.fit(history, GenerationOptions(max_tokens=256, truncate=False))


def test_tools_that_fill_the_budget_never_cut_the_instructions_and_the_question_to_nothing() -> None:
    """The excess is the offered tools' (rendered by the template, never cut): the messages keep at least their
    start and end, and the prompt goes out whole when it fits the context; the reply gets the room left."""
    llama = FakeLlama(1024)
    llama.metadata["tokenizer.chat_template"] = (  # ChatML that renders the offered tools, as Qwen's does
        "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    prompt = LlamaPrompt(llama, "You are a helpful voice assistant.")
    tools = tuple({"type": "function", "name": f"tool_{n}", "description": "looks things up " * 20,
                   "parameters": {"type": "object", "properties": {}}} for n in range(8))
    question = "What is the weather in Paris tomorrow?"
    tokens = prompt.fit([ChatMessage("user", question)], GenerationOptions(max_tokens=256, tools=tools))
    assert len(tokens) < 1024
    text = _text(llama, tokens)
    assert question in text and "helpful voice assistant" in text


def test_the_last_of_the_shortenings_counts() -> None:
    """Several long instructions each need a cut: every cut made is in the prompt that goes out."""
    llama, prompt = _prompt(1024)
    history = [ChatMessage("system", f"RULE {n}: " + "be brief and kind " * 50) for n in range(7)]
    tokens = prompt.fit([*history, ChatMessage("user", "Hi!")], GenerationOptions(max_tokens=256))
    assert len(tokens) <= 1024 - 256, "the reply keeps the room it asked for"
    assert "Hi!" in _text(llama, tokens)


def test_long_instructions_are_cut_the_same_way_every_turn() -> None:
    """Instructions too long for the context are cut to the same text whatever the turn's question, so the
    prompt's prefix stays the same from turn to turn and llama.cpp reuses its cached evaluation (a cut that
    followed each question's length changed the prefix, and every turn evaluated the whole prompt again)."""
    llama, prompt = _prompt(1024)
    rules = ChatMessage("system", "RULES " + "be kind and brief. " * 400 + "END OF RULES")
    options = GenerationOptions(max_tokens=256)
    first = prompt.fit([rules, ChatMessage("user", "Hi!")], options)
    second = prompt.fit([rules, ChatMessage("user", "Hi!"), ChatMessage("assistant", "Hello, how can I help?"),
                         ChatMessage("user", "What will the weather be like in Paris tomorrow afternoon, "
                                             "and should I take an umbrella with me when I go out?")], options)
    assert len(first) <= 1024 - 256 and len(second) <= 1024 - 256
    rules_end = _text(llama, first).index("END OF RULES") + len("END OF RULES")
    shared = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first))
    assert len(_text(llama, first[:shared])) >= rules_end, "the cut instructions differ between the turns"
    assert "END OF RULES" in _text(llama, second) and "umbrella" in _text(llama, second)


def test_many_instructions_capped_still_leave_a_long_question_its_cut() -> None:
    """Instructions are capped once; a newest message still too long is then cut itself, not left to overflow
    while the instructions are cut a little more on every pass."""
    llama, prompt = _prompt(2048)
    # forty short rules: each cut to its floor of 32 tokens, together still over their share of the budget
    rules = [ChatMessage("system", f"RULE {n}: " + "answer briefly. " * 15) for n in range(40)]
    question = ChatMessage("user", "START " + "and then " * 1800 + "so what now?")
    tokens = prompt.fit([*rules, question], GenerationOptions(max_tokens=256))
    assert len(tokens) <= 2048 - 256, "the reply keeps the room it asked for"
    text = _text(llama, tokens)
    assert "START" in text and "so what now?" in text and "RULE 9" in text


def test_a_reply_as_long_as_the_context_does_not_push_the_history_out() -> None:
    llama, prompt = _prompt()
    history = [ChatMessage("user", "My name is Ada."), ChatMessage("assistant", "Nice to meet you, Ada."),
               ChatMessage("user", "What is my name?")]
    # max_output_tokens of 4096 (allowed by the protocol) on a 1024-token context
    tokens = prompt.fit(history, GenerationOptions(max_tokens=4096))
    assert "My name is Ada." in _text(llama, tokens)


_WEATHER = [{"type": "function", "name": "get_weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_closing_tool_call_tag_outside_a_call_is_not_spoken(step: int) -> None:
    text = ('Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call></tool_call>'
            " One moment.")
    splitter = ToolCallSplitter(_WEATHER)
    pieces: list[ReplyPiece] = []
    for start in range(0, len(text), step):
        pieces += splitter.feed(text[start:start + step])
    pieces += splitter.finish()
    spoken = "".join(piece for piece in pieces if isinstance(piece, str))
    calls = [piece for piece in pieces if isinstance(piece, ToolCall)]
    assert spoken == "Sure.  One moment."
    assert [(call.name, call.arguments, call.refused) for call in calls] == [("get_weather", '{"city": "Paris"}', None)]


class _LongClipWhisper:
    """A multilingual faster-whisper model that hears Traditional Chinese in any clip over 30 s."""

    supported_languages = ("en", "zh")

    def __init__(self) -> None:
        self.model = SimpleNamespace(is_multilingual=True)

    def transcribe(self, clip: object, **options: object) -> tuple[list[object], object]:
        word = SimpleNamespace(word="國語", start=0.0, end=0.5, probability=0.9)
        segment = SimpleNamespace(text="這是國語", no_speech_prob=0.1, avg_logprob=-0.2, words=[word])
        return [segment], SimpleNamespace(language="zh")


def test_a_chinese_clip_over_30_s_is_in_simplified_characters_like_a_short_one() -> None:
    core = WhisperCore(_LongClipWhisper())  # type: ignore[arg-type]
    clip = 0.1 * np.sin(np.arange(31 * LISTEN_SAMPLE_RATE, dtype=np.float32) / 10)
    transcript = core.transcribe(clip, language="zh")
    assert transcript.text == "这是国语"
    assert [(word.word, word.probability) for word in transcript.words] == [("国语", 0.9)]


class _SegmentedWhisper(_LongClipWhisper):
    """The same model, hearing a clip over 30 s as several segments (faster-whisper's sliding windows)."""

    def __init__(self, texts: list[str], language: str) -> None:
        super().__init__()
        self.texts, self.language = texts, language

    def transcribe(self, clip: object, **options: object) -> tuple[list[object], object]:
        segments = [SimpleNamespace(text=text, no_speech_prob=0.1, avg_logprob=-0.2, words=[]) for text in self.texts]
        return segments, SimpleNamespace(language=self.language)


@pytest.mark.parametrize(("texts", "language", "joined"), [
    ([" 你好，", " 世界。", "我用AI", " OK"], "zh", "你好，世界。我用AI OK"),  # no space next to a Han character
    ([" Hello there.", " How are you?", " "], "en", "Hello there. How are you?"),
])
def test_the_segments_of_a_clip_over_30_s_join_as_the_sessions_slices_do(texts: list[str], language: str,
                                                                          joined: str) -> None:
    core = WhisperCore(_SegmentedWhisper(texts, language))  # type: ignore[arg-type]
    clip = 0.1 * np.sin(np.arange(31 * LISTEN_SAMPLE_RATE, dtype=np.float32) / 10)
    assert core.transcribe(clip, language=language).text == joined

