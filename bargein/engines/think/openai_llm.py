"""Any OpenAI-compatible chat completions server as the language model (vLLM, Ollama, llama.cpp server).

Replies stream over server-sent events. Cancellation races every read: the moment the response's
:class:`CancelToken` fires the HTTP stream is closed (the server sees the disconnect and stops
generating) and nothing more is yielded, so a cancel costs at most the chunk already in hand.
Images attached to user turns go out as ``image_url`` content parts with their data URLs. Offered
tools go out as ``tools`` / ``tool_choice``; streamed ``tool_calls`` deltas are gathered by index and
yielded as whole :class:`ToolCall` objects, checked against the tools' schemas, when the stream ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from bargein.engines.base import LanguageModel, LLMCapabilities
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT, with_system_prompt
from bargein.engines.think.tool_calls import chat_tool, offered_tools, resolve_call
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall

T = TypeVar("T")
log = logging.getLogger(__name__)


class LanguageModelError(RuntimeError):
    """The server refused the request or sent something that is not a chat completion stream."""


def public_url(url: str) -> str:
    """``url`` as a log line or a description may show it: without its user, password, query or fragment (an
    ``--llm-url`` may carry credentials in any of them)."""
    try:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<url withheld>"
    return urlunsplit((parts.scheme, (f"[{host}]" if ":" in host else host) + port, parts.path, "", ""))


class _PublicUrls(logging.Filter):
    """httpx logs every request's URL at INFO: it is shown as :func:`public_url`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's URL arguments; never drops a record."""
        if isinstance(record.args, tuple) and any(isinstance(arg, httpx.URL) for arg in record.args):
            record.args = tuple(public_url(str(arg)) if isinstance(arg, httpx.URL) else arg for arg in record.args)
        return True


if not any(isinstance(existing, _PublicUrls) for existing in logging.getLogger("httpx").filters):
    logging.getLogger("httpx").addFilter(_PublicUrls())


def to_openai_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages in the wire format; text-only turns stay plain strings for the widest compatibility."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.images and message.role == "user":
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
            parts.extend({"type": "image_url", "image_url": {"url": image.data_url}}
                         for image in message.images)
            wire.append({"role": message.role, "content": parts})
        elif message.tool_calls:
            wire.append({"role": "assistant", "content": message.content or None, "tool_calls": [
                {"id": call.call_id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}} for call in message.tool_calls]})
        elif message.role == "tool":
            wire.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def wire_tool_choice(options: GenerationOptions) -> Any:
    """``tool_choice`` in the chat completions shape."""
    choice = options.tool_choice
    if isinstance(choice, Mapping):
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def parse_sse_data(line: str) -> dict[str, Any] | None:
    """The JSON payload of one SSE ``data:`` line; ``None`` for comments, other fields and ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        decoded = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise LanguageModelError(f"malformed stream chunk from the server: {payload[:200]!r}") from exc
    if not isinstance(decoded, dict):
        raise LanguageModelError(f"unexpected stream chunk from the server: {payload[:200]!r}")
    if "error" in decoded:
        raise LanguageModelError(f"the server reported an error mid-stream: {decoded['error']}")
    return decoded


def delta_text(chunk: dict[str, Any]) -> str:
    """The text a chat completion chunk adds (empty for role-only or final chunks)."""
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    content = delta.get("content")
    return content if isinstance(content, str) else ""


class ToolCallDeltas:
    """Streamed ``tool_calls`` fragments gathered by index until the stream ends (bounded)."""

    MAX_CALLS = 8
    MAX_ARGUMENT_CHARS = 8_192

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, str]] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        """Take the tool call fragments of one chunk."""
        for choice in (chunk.get("choices") or [])[:1]:
            for fragment in (choice.get("delta") or {}).get("tool_calls") or []:
                index = fragment.get("index", 0)
                if not isinstance(index, int) or (index not in self.calls and len(self.calls) >= self.MAX_CALLS):
                    continue
                call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                call["id"] = fragment.get("id") or call["id"]
                function = fragment.get("function") or {}
                call["name"] += function.get("name") or ""
                if len(call["arguments"]) < self.MAX_ARGUMENT_CHARS:
                    call["arguments"] += function.get("arguments") or ""

    def resolved(self, tools: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
        """The gathered calls, each checked against the offered tools."""
        return [resolve_call(call["arguments"], tools, call_id=call["id"] or None, name=call["name"])
                for _, call in sorted(self.calls.items())]


class OpenAICompatibleLanguageModel(LanguageModel):
    """Streams replies from ``{base_url}/chat/completions``; one HTTP connection pool shared by all sessions.

    Concurrency is the server's business: each session's request is an independent stream, so a
    batching server (vLLM, llama.cpp with ``--parallel``) batches them.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, timeout_s: float = 60.0,
                 client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shown_url = public_url(self.base_url)
        """The URL for the log (the base URL may carry credentials)."""
        self.model = model
        self.system_prompt = system_prompt
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Reads may pause for as long as the server thinks; connecting must be quick.
        self._client = client or httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0))
        self._owns_client = client is None

    @property
    def capabilities(self) -> LLMCapabilities:
        """It offers tools to the server (which calls them or not); it has no prefill."""
        return LLMCapabilities(tools=True)

    def _body(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> dict[str, Any]:
        wire = to_openai_messages(with_system_prompt(messages, self.system_prompt))
        body: dict[str, Any] = {"model": self.model, "messages": wire, "stream": True,
                                "max_tokens": options.max_tokens, "temperature": options.temperature}
        tools = offered_tools(options)
        if tools:
            body["tools"] = [chat_tool(tool) for tool in tools]
            body["tool_choice"] = wire_tool_choice(options)
        return body

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield reply pieces as the server sends them; return at once when ``cancel`` fires."""
        body = self._body(messages, replace(options or GenerationOptions(), tools=()))
        async for chunk in self._chunks(body, cancel):
            if text := delta_text(chunk):
                yield text

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Like :meth:`stream`, offering ``options.tools``; the model's calls come last, whole."""
        options = options or GenerationOptions()
        calls = ToolCallDeltas()
        async for chunk in self._chunks(self._body(messages, options), cancel):
            calls.add(chunk)
            if text := delta_text(chunk):
                yield text
        if not cancel.cancelled:
            for call in calls.resolved(offered_tools(options)):
                yield call

    async def _chunks(self, body: dict[str, Any], cancel: CancelToken) -> AsyncIterator[dict[str, Any]]:
        if cancel.cancelled:
            return
        request = self._client.build_request("POST", f"{self.base_url}/chat/completions", json=body)
        cancelled = asyncio.ensure_future(cancel.wait())
        response: httpx.Response | None = None
        try:
            response = await self._race(self._client.send(request, stream=True), cancelled)
            if response is None:
                return
            if response.status_code >= 400:
                detail = await _body_start(response, 500)
                # the URL and the body are for the operator's log, not for the client
                log.warning("%s/chat/completions answered %d: %s", self.shown_url, response.status_code, detail)
                raise LanguageModelError(f"the language model server answered HTTP {response.status_code}")
            lines = response.aiter_lines()
            events = 0
            other = ""  # the start of what came instead of events, for the log
            while True:
                line = await self._race(anext(lines, None), cancelled)
                if line is None:
                    if events == 0 and not cancel.cancelled:
                        # a 200 with an error body, a whole JSON completion, nothing: no reply, not an empty one
                        log.warning("%s/chat/completions answered %d without events: %r", self.shown_url,
                                    response.status_code, other)
                        raise LanguageModelError("the language model server's answer held no events")
                    return
                if line.startswith("data:"):
                    events += 1
                elif len(other) < 200:
                    other = (other + line)[:200]
                chunk = parse_sse_data(line)
                if chunk is not None and not cancel.cancelled:
                    yield chunk
        finally:
            cancelled.cancel()
            if response is not None:
                # Closing the stream drops the connection, which tells the server to stop generating.
                await response.aclose()

    @staticmethod
    async def _race(work: Awaitable[T], cancelled: asyncio.Future[None]) -> T | None:
        """Await ``work`` unless the cancel future completes first, then give ``None``."""
        task = asyncio.ensure_future(work)
        try:
            done, _ = await asyncio.wait((task, cancelled), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # our own task is cancelled (a deadline): the work must not outlive it
            task.cancel()
            task.add_done_callback(_hang_up)
            raise
        if task in done and not cancelled.done():
            return task.result()
        task.cancel()
        await asyncio.wait((task,))  # unlike awaiting the task, this does not raise its cancellation
        if not task.cancelled() and task.exception() is None:
            leftover = task.result()
            if isinstance(leftover, httpx.Response):  # it connected just as the cancel came: hang up
                await leftover.aclose()
        return None

    async def aclose(self) -> None:
        """Close the connection pool (only if this object created it)."""
        if self._owns_client:
            await self._client.aclose()


_hanging_up: set[asyncio.Task[None]] = set()
"""Closes of responses that came after their request was abandoned (kept referenced until done)."""


def _hang_up(task: asyncio.Future[Any]) -> None:
    """Close the response an abandoned request got anyway (its connection goes back to the pool)."""
    if task.cancelled() or task.exception() is not None:
        return
    leftover = task.result()
    if isinstance(leftover, httpx.Response):
        closing = asyncio.ensure_future(leftover.aclose())
        _hanging_up.add(closing)
        closing.add_done_callback(_hanging_up.discard)


async def _body_start(response: httpx.Response, limit: int) -> str:
    """The first ``limit`` characters of a response's body, reading no more of it than that takes."""
    data = b""
    async for chunk in response.aiter_bytes():  # the caller closes the response, and with it the rest
        data += chunk
        if len(data) >= limit:
            break
    return data.decode("utf-8", "replace")[:limit]
