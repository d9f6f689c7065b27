"""What of a Qwen-style model's tool-calling output is spoken: never an invented ``<tool_response>`` block,
never a bare JSON call written after some words (the call is read, the JSON is not said)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from bargein.engines.think.tool_calls import ToolCallSplitter
from bargein.tools.registry import default_registry
from bargein.values import ToolCall

TOOLS = tuple(default_registry().definitions())
CALL = '{"name": "calculate", "arguments": {"expression": "17 * 23"}}'


def run(pieces: list[str]) -> tuple[str, list[ToolCall]]:
    splitter = ToolCallSplitter(TOOLS)
    out = [piece for chunk in pieces for piece in splitter.feed(chunk)] + splitter.finish()
    return ("".join(p for p in out if isinstance(p, str)),
            [p for p in out if isinstance(p, ToolCall)])


def chars(text: str) -> list[str]:
    return list(text)  # one token per character: every tag is split at every place


@pytest.mark.parametrize("split", [lambda text: [text], chars])
def test_an_invented_tool_response_is_not_spoken(split: object) -> None:
    # before: the model's made-up "<tool_response>{...}</tool_response>" after its call was read aloud
    reply = f'<tool_call>{CALL}</tool_call>\n<tool_response>{{"result": 391}}</tool_response>\nIt is 391.'
    text, calls = run(split(reply))  # type: ignore[operator]
    assert "tool_response" not in text and "391}" not in text and "result" not in text
    assert text.strip() == "It is 391."
    [call] = calls
    assert call.name == "calculate" and call.refused is None


def test_an_unclosed_tool_response_is_dropped_to_the_end() -> None:
    text, _ = run(["Sure. <tool_resp", 'onse>{"result": 391}'])
    assert text.strip() == "Sure."


def test_a_stray_closing_tool_response_tag_is_markup() -> None:
    text, _ = run(["It is 391.</tool_response>"])
    assert text == "It is 391."


@pytest.mark.parametrize("split", [lambda text: [text], chars])
def test_a_bare_call_after_some_words_is_a_call_not_speech(split: object) -> None:
    # before: only a reply that *began* with "{" was read as a bare call; after a few words all of it was said
    text, calls = run(split(f"Let me work that out. {CALL}"))  # type: ignore[operator]
    assert "{" not in text and "calculate" not in text
    assert text.strip() == "Let me work that out."
    [call] = calls
    assert call.name == "calculate" and json.loads(call.arguments) == {"expression": "17 * 23"}


def test_a_fenced_bare_call_after_some_words_is_a_call() -> None:
    text, calls = run(["Checking.\n```json\n", CALL, "\n```"])
    assert text.strip() == "Checking." and [c.name for c in calls] == ["calculate"]


def test_words_after_a_bare_call_are_still_spoken() -> None:
    text, calls = run([f"One moment. {CALL} Done."])
    assert [c.name for c in calls] == ["calculate"] and "One moment." in text and "Done." in text


@pytest.mark.parametrize("reply", ["The set {1, 2} has two members.", 'He wrote {"answer": 4} on the board.',
                                   "Braces { and } are fine."])
def test_braces_that_are_no_call_are_spoken(reply: str) -> None:
    for split in ([reply], chars(reply)):
        text, calls = run(split)
        assert text == reply and not calls


def test_prose_that_quotes_name_is_spoken_as_it_streams() -> None:
    """A ``{"name"`` with no string value after it is prose: the words after it are spoken as they come, not
    held back until the model stops (up to 8 KB later)."""
    splitter = ToolCallSplitter(TOOLS)
    text = 'Sure, {"name" is the key you need. ' + "Then you read the value that goes with it. " * 10
    streamed = [p for i in range(0, len(text), 5) for p in splitter.feed(text[i:i + 5]) if isinstance(p, str)]
    assert len("".join(streamed)) > len(text) - 20, "held back instead of spoken as it streamed"
    assert "".join(streamed) + "".join(p for p in splitter.finish() if isinstance(p, str)) == text


async def _split_without_tools(text: str) -> list[object]:
    from bargein.engines.think.tool_calls import split_calls
    from bargein.values import CancelToken, GenerationOptions

    async def stream() -> AsyncIterator[str]:
        for start in range(0, len(text), 3):
            yield text[start:start + 3]
    return [piece async for piece in split_calls(stream(), GenerationOptions(), CancelToken())]


@pytest.mark.parametrize("reply", [
    '<tool_response>{"result": 391}</tool_response>It is 391.',
    '<tool_call>{"name": "calculate", "arguments": {"expression": "17 * 23"}}</tool_call>It is 391.',
])
async def test_call_markup_in_a_reply_offered_no_tools_is_not_spoken(reply: str) -> None:
    """The answer to a tool's result is offered no tools, and the small model still echoes call markup there."""
    pieces = await _split_without_tools(reply)
    assert all(isinstance(p, str) for p in pieces), "no call is run either"
    assert "".join(p for p in pieces if isinstance(p, str)) == "It is 391."


async def test_a_plain_reply_offered_no_tools_streams_unchanged() -> None:
    text = "Sure: 17 times 23 is 391, {roughly} 400."
    assert "".join(p for p in await _split_without_tools(text) if isinstance(p, str)) == text
