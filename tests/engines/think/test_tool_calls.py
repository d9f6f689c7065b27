"""Reading tool calls out of model output (both tag styles, bare JSON, repair and refusal) and the
OpenAI-compatible backend's tool call deltas."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from bargein.engines.think.llama_prompt import fold_tool_results, forced_prefix
from bargein.engines.think.openai_llm import OpenAICompatibleLanguageModel, to_openai_messages
from bargein.engines.think.tool_calls import (
    ToolCallSplitter,
    after_tool_result,
    forced_tool,
    offered_tools,
    resolve_call,
    split_calls,
)
from bargein.tools.arguments import ArgumentError, parse_arguments
from bargein.tools.registry import default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ToolCall

TOOLS = tuple(default_registry().definitions())


def run_splitter(pieces: list[str]) -> list[str | ToolCall]:
    splitter = ToolCallSplitter(TOOLS)
    out: list[str | ToolCall] = []
    for piece in pieces:
        out.extend(splitter.feed(piece))
    out.extend(splitter.finish())
    return out


def text_of(out: list[str | ToolCall]) -> str:
    return "".join(piece for piece in out if isinstance(piece, str))


def calls_of(out: list[str | ToolCall]) -> list[ToolCall]:
    return [piece for piece in out if isinstance(piece, ToolCall)]


def test_tagged_call_split_across_tokens_is_read() -> None:
    pieces = ["Let me check.", " <tool", "_call>\n{\"name\": \"calcul", "ate\", \"arguments\": ",
              "{\"expression\": \"17 * 23\"}}\n</tool_", "call>"]
    out = run_splitter(pieces)
    assert text_of(out).strip() == "Let me check."
    [call] = calls_of(out)
    assert call.name == "calculate" and json.loads(call.arguments) == {"expression": "17 * 23"}
    assert call.refused is None and call.call_id.startswith("call_")


def test_plain_text_passes_through_and_a_lone_angle_bracket_is_not_swallowed() -> None:
    out = run_splitter(["The answer", " is 3 <", " 4, so", " yes."])
    assert out and text_of(out) == "The answer is 3 < 4, so yes." and not calls_of(out)


def test_bare_and_fenced_json_replies_are_calls() -> None:
    [bare] = calls_of(run_splitter(['{"name": "get_current_time", ', '"arguments": {"place": "Tokyo"}}']))
    assert bare.name == "get_current_time" and json.loads(bare.arguments) == {"place": "Tokyo"}
    fenced = calls_of(run_splitter(["```", "json\n", '{"name": "calculate", "arguments": {"expression": "1+1"}}',
                                    "\n```"]))
    assert fenced[0].name == "calculate" and fenced[0].refused is None


def test_json_that_is_not_a_call_stays_text() -> None:
    out = run_splitter(['{"answer": 4}'])
    assert text_of(out) == '{"answer": 4}' and not calls_of(out)


@pytest.mark.parametrize(("pieces", "spoken"), [
    (['{"name', 'A spider', ' has eight legs."'], "A spider has eight legs."),
    (['{"name": ', "I'm sorry, ", "could you say that again?"], "I'm sorry, could you say that again?"),
    (['{ "name', "The bus leaves at ten.", '"}'], "The bus leaves at ten."),
])
def test_a_call_opened_and_then_answered_in_words_speaks_only_the_words(pieces: list[str], spoken: str) -> None:
    # the embedded model, offered the built-in tools, sometimes opens a call greedily and then answers in words
    out = run_splitter(pieces)
    assert text_of(out) == spoken and not calls_of(out)


def test_unclosed_call_is_still_read_and_a_bad_one_refused_visibly() -> None:
    [cut] = calls_of(run_splitter(['<tool_call>{"name": "calculate", "arguments": {"expression": "2*3"}']))
    assert cut.name == "calculate" and cut.refused is None and cut.repaired
    [unknown] = calls_of(run_splitter(['<tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call>']))
    assert unknown.refused and "launch_rocket" in unknown.refused and "launch_rocket" in unknown.raw
    [garbage] = calls_of(run_splitter(["<tool_call>calculate two plus two</tool_call>"]))
    assert garbage.refused and garbage.raw == "calculate two plus two"
    [unfit] = calls_of(run_splitter(['<tool_call>{"name": "convert_units", "arguments": {"value": 3}}</tool_call>']))
    assert unfit.refused and "missing required" in unfit.refused


def test_resolve_repairs_arguments_the_schema_can_fix() -> None:
    call = resolve_call('{"name": "convert_units", "arguments": {"value": "5", "from_unit": "miles", '
                        '"to_unit": "km", "precision": 2}}', TOOLS)
    assert call.refused is None and call.repaired
    assert json.loads(call.arguments) == {"value": 5.0, "from_unit": "miles", "to_unit": "km"}
    by_name = resolve_call('{"expression": "2 + 2"}', TOOLS, name="calculate", call_id="call_x")
    assert by_name.call_id == "call_x" and not by_name.repaired


def test_tool_choice_filters_and_forces() -> None:
    assert offered_tools(GenerationOptions(tools=TOOLS, tool_choice="none")) == []
    named = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "name": "calculate"})
    assert [t["name"] for t in offered_tools(named)] == ["calculate"]
    assert forced_tool(named) == "calculate"
    assert forced_prefix(named).endswith('{"name": "calculate", "arguments": ')
    assert forced_tool(GenerationOptions(tools=TOOLS, tool_choice="required")) == ""
    assert forced_tool(GenerationOptions(tools=TOOLS)) is None
    assert forced_prefix(GenerationOptions(tools=TOOLS)) == ""


def test_after_a_tool_result_the_model_answers_in_words() -> None:
    call = ToolCall("calculate", "call_1", '{"expression": "2+2"}')
    history = [ChatMessage("user", "what is two plus two"), ChatMessage("assistant", "", tool_calls=(call,)),
               ChatMessage("tool", "2+2 = 4", tool_call_id="call_1")]
    assert after_tool_result(history, GenerationOptions(tools=TOOLS)).tools == ()
    required = GenerationOptions(tools=TOOLS, tool_choice="required")
    assert after_tool_result(history, required).tools == TOOLS
    folded = fold_tool_results(history)
    assert [m.role for m in folded] == ["user", "system"] and "calculate tool answered: 2+2 = 4" in folded[1].content


async def test_forced_prefix_completes_a_call_written_only_in_part() -> None:
    async def model_text() -> AsyncIterator[str]:
        yield '{"expression": "6*7"}}\n</tool_call>'

    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "name": "calculate"})
    out = [piece async for piece in split_calls(model_text(), options, CancelToken(),
                                                already_written=forced_prefix(options))]
    [call] = calls_of(out)
    assert call.name == "calculate" and json.loads(call.arguments) == {"expression": "6*7"}


def test_tool_exchanges_go_out_in_the_chat_completions_shape() -> None:
    call = ToolCall("calculate", "call_1", '{"expression": "2+2"}')
    wire = to_openai_messages([ChatMessage("user", "hi"), ChatMessage("assistant", "", tool_calls=(call,)),
                               ChatMessage("tool", "4", tool_call_id="call_1")])
    assert wire[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "2+2"}'}}]}
    assert wire[2] == {"role": "tool", "tool_call_id": "call_1", "content": "4"}


def sse(*chunks: dict[str, object]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


async def test_openai_backend_sends_tools_and_gathers_streamed_call_deltas() -> None:
    seen: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        def delta(**fields: object) -> dict[str, object]:
            return {"choices": [{"index": 0, "delta": fields}]}
        return httpx.Response(200, content=sse(
            delta(role="assistant"),
            delta(tool_calls=[{"index": 0, "id": "call_abc", "type": "function",
                               "function": {"name": "calculate", "arguments": ""}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '{"expres'}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": 'sion": "17*23"}'}}]),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    model = OpenAICompatibleLanguageModel("http://llm.test/v1", "m", client=client)
    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "name": "calculate"})
    out = [p async for p in model.stream_reply([ChatMessage("user", "17 times 23?")], cancel=CancelToken(),
                                               options=options)]
    assert out == [ToolCall("calculate", "call_abc", '{"expression": "17*23"}',
                            raw='{"expression": "17*23"}')]
    body = seen[0]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "calculate"}}
    assert [t["function"]["name"] for t in body["tools"]] == ["calculate"]  # type: ignore[index,union-attr]
    text_only = [p async for p in model.stream([ChatMessage("user", "hi")], cancel=CancelToken(), options=options)]
    assert text_only == [] and "tools" not in seen[1]
    await client.aclose()


@pytest.mark.slow
async def test_embedded_model_calls_a_tool_and_then_answers_with_its_result() -> None:
    from bargein.engines.think.llama_llm import load_llama

    model = load_llama(seed=1)
    registry = default_registry()
    options = GenerationOptions(max_tokens=80, temperature=0.0, tools=TOOLS)
    try:
        question = [ChatMessage("user", "What is 17 times 23?")]
        out = [p async for p in model.stream_reply(question, cancel=CancelToken(), options=options)]
        [call] = calls_of(out)
        assert call.name == "calculate" and call.refused is None
        result = registry.run(call.name, call.arguments)
        assert result.ok and result.output.endswith("= 391")
        history = [*question, ChatMessage("assistant", "", tool_calls=(call,)),
                   ChatMessage("tool", result.output, tool_call_id=call.call_id)]
        answer = [p async for p in model.stream_reply(history, cancel=CancelToken(), options=options)]
        assert not calls_of(answer) and "391" in text_of(answer)
    finally:
        await model.aclose()


def test_a_recited_tool_list_is_refused_not_spoken() -> None:
    out = run_splitter(["<to", "ols>\n", '{"type": "function", "function": {"name": "calculate"}}', "\n</tools>"])
    [refused] = calls_of(out)
    assert not text_of(out) and refused.refused and "tool list" in refused.refused
    still_a_call = run_splitter(["<tool", '_call>{"name": "calculate", "arguments": {"expression": "1"}}</tool_call>'])
    assert calls_of(still_a_call)[0].name == "calculate"
    assert text_of(run_splitter(["<", "b>bold</b> words"])) == "<b>bold</b> words"


@pytest.mark.slow
async def test_batched_embedded_model_calls_a_tool_too() -> None:
    from bargein.engines.think.llama_batched import load_batched_llama
    from bargein.engines.think.llama_llm import DEFAULT_LLM

    model = load_batched_llama(DEFAULT_LLM, n_seq=2)
    options = GenerationOptions(max_tokens=80, temperature=0.0, tools=TOOLS)
    try:
        question = [ChatMessage("user", "What is 17 times 23?")]
        [call] = calls_of([p async for p in model.stream_reply(question, cancel=CancelToken(), options=options)])
        assert call.name == "calculate" and call.refused is None
        output = default_registry().run(call.name, call.arguments).output
        history = [*question, ChatMessage("assistant", "", tool_calls=(call,)),
                   ChatMessage("tool", output, tool_call_id=call.call_id)]
        answer = [p async for p in model.stream_reply(history, cancel=CancelToken(), options=options)]
        assert not calls_of(answer) and "391" in text_of(answer)
        plain = [p async for p in model.stream(question, cancel=CancelToken(), options=options)]
        assert plain and all(isinstance(p, str) for p in plain)  # stream() never offers the tools
    finally:
        model.close()


def test_an_overlong_tagged_call_is_refused_and_none_of_it_is_spoken() -> None:
    body = '{"name": "calculate", "arguments": {"expression": "' + "1+" * 6_000 + '1"}}'
    pieces = ["Sure. <tool_call>", *(body[start:start + 50] for start in range(0, len(body), 50)),
              "</tool_call> Done."]
    out = run_splitter(pieces)
    [call] = calls_of(out)
    assert call.refused and "too long" in call.refused
    assert text_of(out) == "Sure.  Done.", "the rest of the refused call must not be read aloud"


@pytest.mark.parametrize("arguments", [
    '{"expression": ' + "1" * 5_000 + "}",  # an integer past Python's digit limit
    "[" * 5_000,  # deeper than the JSON decoder's recursion limit
    '{"expression": ' + "[" * 3_000 + "}",
])
def test_arguments_no_parser_can_read_are_refused_not_raised(arguments: str) -> None:
    call = resolve_call(arguments, TOOLS, name="calculate")
    assert call.refused and call.name == "calculate"
    out = run_splitter([f'<tool_call>{{"name": "calculate", "arguments": {arguments}}}</tool_call>'])
    [tagged] = calls_of(out)
    assert tagged.refused


@pytest.mark.parametrize("arguments", ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": 1e999}',
                                       '{"x": "1e999"}', "{'x': 1e999}"])
def test_arguments_sent_on_are_strict_json(arguments: str) -> None:
    tool = {"type": "function", "name": "f",
            "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}
    call = resolve_call(arguments, [tool], name="f")
    if call.refused is None:
        def no_constants(name: str) -> None:
            raise AssertionError(f"{name} is not JSON")
        json.loads(call.arguments, parse_constant=no_constants)
        assert all(abs(value) < float("inf") for value in json.loads(call.arguments).values())


@pytest.mark.parametrize("separator", ["\n", "\n</tool_call>\n<tool_call>\n", "</tool_call>\n"])
def test_several_bare_calls_are_all_read(separator: str) -> None:
    first = '{"name": "calculate", "arguments": {"expression": "2+2"}}'
    second = '{"name": "get_current_time", "arguments": {"place": "Tokyo"}}'
    out = run_splitter([first, separator, second])
    calls = calls_of(out)
    assert [call.name for call in calls] == ["calculate", "get_current_time"]
    assert all(call.refused is None for call in calls) and not text_of(out).strip()
    assert len({call.call_id for call in calls}) == 2


UNWRITABLE = ["{'expression': '2+2', 'x': {1, 2}}", "{'expression': 1j}", "{'expression': b'2+2'}",
              "{(1, 2): 'x'}", '{"expression": "2+2", [1]: 2}']
"""Python literals the mending reads (``ast.literal_eval``) that JSON cannot carry, or that it cannot build."""


@pytest.mark.parametrize("arguments", UNWRITABLE)
def test_arguments_json_cannot_carry_are_refused_on_every_path(arguments: str) -> None:
    """A set, a complex number, bytes or a tuple key in mended arguments is a refused call, never an exception:
    parsed alone, resolved by name (the OpenAI-compatible path), in a tagged call, and run as a built-in."""
    with pytest.raises(ArgumentError):
        parse_arguments(arguments)
    assert resolve_call(arguments, TOOLS, name="calculate").refused
    [tagged] = calls_of(run_splitter(['<tool_call>{"name": "calculate", "arguments": ' + arguments + "}</tool_call>"]))
    assert tagged.refused
    assert not default_registry().run("calculate", arguments).ok
