"""A built-in call is run only when its arguments rest on what the user said (or a tool answered).

The ungrounded calls below are the embedded 0.5B model's own, recorded on a fresh conversation with the
built-in tools offered: it copies the examples of the tools' descriptions ("e.g. Tokyo", "15 / 100 * 80")
or a date of its training years when the user's words give it nothing to call with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest

from bargein.engines.base import Engines, LanguageModel, LLMCapabilities
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.speculation import PrefetchedReply
from bargein.session.tool_use import reply_with_tools, ungrounded_call
from bargein.tools.grounding import grounded
from bargein.tools.registry import default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall
from tests.support.session_harness import Harness
from tests.support.tones import quiet, stream, tone


@pytest.mark.parametrize(("arguments", "said"), [
    ('{"place": "Tokyo"}', "My favourite colour is green."),
    ('{"place": "Tokyo"}', "He was not an old-sposed young man."),
    ('{"date": "2023-04-15"}', "How far away is the moon?"),
    ('{"expression": "15 / 100 * 80.0"}', "And Mr. John Dashwood had then leisure to consider how much there "
                                          "might be prudently in his power to do for them."),
    ('{"expression": "3.5 * 60"}', "How many calories are in a banana?"),
    ('{"expression": "3600"}', "How many seconds are there in a day?"),
])
def test_a_call_filled_in_from_the_tools_description_is_not_grounded(arguments: str, said: str) -> None:
    assert not grounded(arguments, said)


@pytest.mark.parametrize(("arguments", "said"), [
    ('{"place": "Los Angeles"}', "What's the time in Los Angeles?"),
    ('{"expression": "48 * 12"}', "What is 48 times 12?"),
    ('{"expression": "17 * 23"}', "calculate seventeen times twenty three"),
    ('{"expression": "48 * 12"}', "what is forty eight times twelve"),
    ('{"expression": "3.5 * 60"}', "How many minutes are in three and a half hours?"),
    ('{"expression": "1234 + 5678"}', "What is 1,234 plus 5,678?"),
    ('{"date": "2027-07-04"}', "What day of the week is the fourth of July, 2027?"),
    ('{"value": 5, "from_unit": "miles", "to_unit": "kilometers"}', "Convert 5 miles to kilometres."),
    ("{}", "What time is it?"),
])
def test_a_call_that_uses_the_users_words_is_grounded(arguments: str, said: str) -> None:
    assert grounded(arguments, said)


def test_a_chained_call_may_rest_on_an_earlier_tools_answer_and_raw_arguments_are_read_as_text() -> None:
    asked = "How many hours until midnight in Tokyo?"
    answered = "In Tokyo it is 21:40 (09:40 PM) on Tuesday 1 December 2026"
    assert grounded('{"expression": "24 - 21"}', f"{asked} {answered}")
    assert not grounded('{"expression": "24 - 21"}', asked)
    assert grounded("Tokyo", "what time is it in tokyo") and not grounded("Tokyo", "hello there")


async def test_a_prefetched_reply_asks_again_without_tools_before_the_commit_and_speaks_that_answer() -> None:
    registry = default_registry()
    options = GenerationOptions(tools=tuple(registry.definitions()))
    llm = FakeLanguageModel(calls={"green": ("get_current_time", '{"place": "Tokyo"}')})

    def prefetched(said: str) -> PrefetchedReply:
        messages = [ChatMessage("user", said)]
        return PrefetchedReply(llm, messages, options, FakeSynthesizer(), "alloy",
                               drops_call=lambda call: ungrounded_call(call, messages, options, registry))

    reply = prefetched("my favourite colour is green")
    for _ in range(200):
        await asyncio.sleep(0.001)
        if reply.first_clause is not None and reply.first_clause.done:
            break
    assert reply.first_clause is not None, "the plain answer's first clause was spoken before the commit"
    pieces = [piece async for piece in reply.adopt(CancelToken())]
    assert not any(isinstance(piece, ToolCall) for piece in pieces)
    assert "".join(p for p in pieces if isinstance(p, str)) == "You said: my favourite colour is green."
    grounded_call = prefetched("what time is it in tokyo, where the tea is green")
    pieces = [piece async for piece in grounded_call.adopt(CancelToken())]
    assert [p.name for p in pieces if isinstance(p, ToolCall)] == ["get_current_time"]


def test_accents_and_thousands_separators_are_read_alike_and_odd_arguments_never_raise() -> None:
    assert grounded('{"place": "Zürich"}', "what time is it in zurich")
    assert grounded('{"expression": "1,000 * 3"}', "three times 1,000")
    assert not grounded('{"value": ' + "9" * 5000 + "}", "what time is it")  # past Python's int digit limit
    assert grounded('[{"a": [1, null, true]}, 2.5]', "one thing") and grounded("null", "anything")


class TwoCalls(LanguageModel):
    """A model whose reply opens with a grounded call and then an ungrounded one in the same round."""

    capabilities = LLMCapabilities(tools=True)

    def __init__(self) -> None:
        self.seen: list[list[ChatMessage]] = []

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        self.seen.append(list(messages))
        yield "plain"

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        self.seen.append(list(messages))
        if messages[-1].role == "tool":
            yield f"The tool said: {messages[-1].content}"
            return
        yield ToolCall("calculate", "call_1", '{"expression": "48 * 12"}')
        yield ToolCall("get_current_time", "call_2", '{"place": "Tokyo"}')


async def test_a_later_ungrounded_call_is_left_out_and_the_grounded_one_answered() -> None:
    llm = TwoCalls()
    ran: list[str] = []
    options = GenerationOptions(tools=tuple(default_registry().definitions()))
    pieces = [piece async for piece in reply_with_tools(
        llm, [ChatMessage("user", "what is 48 times 12")], cancel=CancelToken(), options=options,
        server_side=default_registry(), report=lambda call, outcome: ran.append(call.name))]
    assert ran == ["calculate"], "the grounded call ran; the ungrounded one after it did not"
    assert pieces == ["The tool said: 48 * 12 = 576"]


class MadeUpCall(TwoCalls):
    """Opens its reply with a call to a tool no one offered, as the embedded model did once."""

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        self.seen.append(list(messages))
        yield ToolCall("amity", "call_1", refused="the model called 'amity', which is not one of the offered tools")


async def test_a_call_to_a_tool_no_one_offered_is_answered_in_words_not_with_a_refusal_round() -> None:
    llm = MadeUpCall()
    ran: list[str] = []
    options = GenerationOptions(tools=tuple(default_registry().definitions()))
    said = [ChatMessage("user", "He might even have been made amiable himself.")]
    pieces = [piece async for piece in reply_with_tools(
        llm, said, cancel=CancelToken(), options=options, server_side=default_registry(),
        report=lambda call, outcome: ran.append(call.name))]
    assert ran == [] and pieces == ["plain"], "asked for words, then again without tools: no refusal round"
    assert all(messages[:1] == said and all(m.role in ("user", "system") for m in messages) for messages in llm.seen)
    # a refused call of an offered tool (arguments that cannot be mended) still gets its reason
    bad_arguments = ToolCall("calculate", "call_2", refused="the arguments do not fit")
    assert not ungrounded_call(bad_arguments, said, options, default_registry())


async def test_a_required_call_is_run_whatever_its_arguments() -> None:
    ran: list[str] = []
    llm = FakeLanguageModel(calls={"green": ("get_current_time", '{"place": "Tokyo"}')})
    options = GenerationOptions(tools=tuple(default_registry().definitions()), tool_choice="required")
    pieces = [piece async for piece in reply_with_tools(
        llm, [ChatMessage("user", "my favourite colour is green")], cancel=CancelToken(), options=options,
        server_side=default_registry(), report=lambda call, outcome: ran.append(call.name))]
    assert ran == ["get_current_time"] and "".join(p for p in pieces if isinstance(p, str)).startswith("The tool")


async def test_a_spoken_turn_whose_prefetch_drops_the_call_speaks_the_plain_answer_prepared_before_the_commit(
) -> None:
    llm = FakeLanguageModel(calls={"green": ("get_current_time", '{"place": "Tokyo"}')})
    h = Harness(Engines(FakeVad(), FakeRecognizer(("my favourite colour is green",)), llm, FakeSynthesizer()),
                builtins=default_registry())
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(1.5)]))
    await h.drain(until="response.done")
    transcript = [e for e in h.events if e["type"] == "response.output_audio_transcript.done"][0]["transcript"]
    assert transcript == "You said: my favourite colour is green."
    counts = h.session.speculation
    assert counts.llm_used == 1 and counts.tts_used == 1, "the plain answer's first clause was ready at the commit"
    await h.session.close()


HERMES_STYLE = (
    "{% if tools %}<|im_start|>system\n{{ messages[0]['content'] }}\n<tools>{% for tool in tools %}"
    "{{ tool | tojson }}{% endfor %}</tools><|im_end|>\n{% set rest = messages[1:] %}{% else %}"
    "{% set rest = messages %}{% endif %}{% for message in rest %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
"""A chat template that, like Qwen2.5's, describes the offered tools in the system turn."""


async def test_the_answer_asked_again_after_a_dropped_call_only_appends_to_the_prompt_just_evaluated() -> None:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from bargein.engines.think.llama_prompt import render

    formatter = Jinja2ChatFormatter(template=HERMES_STYLE, eos_token="<|im_end|>", bos_token="")
    registry = default_registry()
    options = GenerationOptions(tools=tuple(registry.definitions()))
    llm = FakeLanguageModel(calls={"green": ("get_current_time", '{"place": "Tokyo"}')})
    said = [ChatMessage("system", "Be brief."), ChatMessage("user", "Quoted notes. My favourite colour is green.")]
    pieces = [piece async for piece in reply_with_tools(
        llm, said, cancel=CancelToken(), options=options, server_side=registry, report=lambda call, outcome: None)]
    assert "".join(p for p in pieces if isinstance(p, str)).startswith("You said: Quoted notes.")
    assert len(llm.seen_options) == 2, "asked again with the tools still in the prompt"
    first, again = (render(formatter, llm.seen[index], llm.seen_options[index]) for index in (0, 1))
    evaluated = first.removesuffix("<|im_start|>assistant\n")
    assert "get_current_time" in evaluated and again.startswith(evaluated), "the cached prompt is reused whole"
    assert len(again) - len(evaluated) < 150, "only the note asking for words is new"


def test_the_camera_guidances_example_exchange_grounds_no_call() -> None:
    """The example exchange after the camera's guidance (private: the server's, not the user's) is no one's words."""
    from bargein.session.eyes import GUIDANCE, GUIDANCE_EXAMPLE

    options = GenerationOptions(tools=tuple(default_registry().definitions()))
    call = ToolCall("get_current_time", "call_1", '{"place": "grass"}')
    messages = [ChatMessage("system", "Be brief."), GUIDANCE, *GUIDANCE_EXAMPLE, ChatMessage("user", "what time is it")]
    assert ungrounded_call(call, messages, options, default_registry())
    assert not ungrounded_call(call, [*messages[:-1], ChatMessage("user", "is the grass wet")], options,
                               default_registry()), "the user's own words still ground it"
