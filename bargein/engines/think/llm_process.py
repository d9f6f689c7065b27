"""A language model in a supervised worker process, so a crash in native code cannot take the server down.

:class:`ProcessLanguageModel` is a client of :class:`~bargein.engines.process.supervisor.EngineProcess`:
each reply is one request (the messages, options and whether tools are offered) whose items are the
reply's pieces (text, or a whole :class:`~bargein.values.ToolCall`). A reply's cancel reaches the
worker as a message and the model's own cancel flag stops it within one token; the server side stops
yielding at once. :class:`LanguageModelService` is the worker's side: it builds the real model from a
:class:`WorkerSpec` and streams its replies.

If the worker dies (a segfault in llama.cpp, the OOM killer, a ``kill -9``), every reply it was serving
fails with :class:`WorkerDied`, which the session turns into its fallback reply (a spoken apology), and
the supervisor starts a new worker; replies asked for meanwhile wait for it (up to ``ready_wait_s``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from bargein.engines.base import LanguageModel, LLMCapabilities
from bargein.engines.process.child import EngineService
from bargein.engines.process.client import ProcessClient
from bargein.engines.process.supervisor import EngineProcess, python_worker
from bargein.engines.process.wire import WorkerDied, WorkerError, WorkerSpec
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall

__all__ = ["LanguageModelService", "ProcessLanguageModel", "WorkerDied", "WorkerError", "WorkerSpec"]


class ProcessLanguageModel(ProcessClient, LanguageModel):
    """A :class:`~bargein.engines.base.LanguageModel` served by a supervised worker process."""

    def __init__(self, spec: WorkerSpec, *, name: str = "llm", start_timeout_s: float = 600.0,
                 ready_wait_s: float = 60.0, restart_backoff_s: float = 0.5, text_end: bool = False) -> None:
        self.spec = spec
        self.name = name
        self._text_end = text_end
        """Whether the worker's model estimates the end of the user's sentence (declared by whoever chose the
        model: the embedded one-sequence engine does)."""
        self._nonfinite = 0
        self.process = EngineProcess(
            python_worker(WorkerSpec("bargein.engines.think.llm_process:LanguageModelService", {"model": spec}), "llm"),
            name=name, start_timeout_s=start_timeout_s, ready_wait_s=ready_wait_s,
            restart_backoff_s=restart_backoff_s, stage="llm")

    @property
    def capabilities(self) -> LLMCapabilities:
        """Tool calls and prefills go to the worker, which passes on what its model can do; the end-of-sentence
        estimate where the constructor was told the worker's model has it."""
        return LLMCapabilities(tools=True, prefill=True, text_end=self._text_end)

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield the reply piece by piece; return at once when ``cancel`` fires."""
        async for piece in self._pieces(messages, cancel, options, tools=False):
            if isinstance(piece, str):
                yield piece

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Reply text and tool calls, when the worker's model can call tools (plain text otherwise)."""
        async for piece in self._pieces(messages, cancel, options, tools=True):
            yield piece

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        """Have the worker's model evaluate a prompt ahead of its reply, where it can; never waits."""
        self.process.notify((list(messages), options or GenerationOptions()))

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        """The worker's model's end-of-sentence estimate for the last message's words (None without one)."""
        if not self._text_end:
            return None
        request = (list(messages), options or GenerationOptions(), False, "text_end")
        estimate = None
        async for item in self.process.stream(request, CancelToken()):  # one item at most, then the end
            estimate = float(item)
        return estimate

    async def _pieces(self, messages: Sequence[ChatMessage], cancel: CancelToken,
                      options: GenerationOptions | None, *, tools: bool) -> AsyncIterator[ReplyPiece]:
        request = (list(messages), options or GenerationOptions(), tools)
        async for piece in self.process.stream(request, cancel, on_end=self._ended):
            yield piece if isinstance(piece, ToolCall) else str(piece)

    @property
    def nonfinite_fallbacks(self) -> int:
        """The worker model's count, as its last reply's end said."""
        return self._nonfinite

    def _ended(self, nonfinite_fallbacks: Any) -> None:
        self._nonfinite = max(self._nonfinite, int(nonfinite_fallbacks or 0))


class LanguageModelService(EngineService):
    """The worker's side: the model ``model`` names, serving one reply per request."""

    def __init__(self, model: WorkerSpec) -> None:
        self.engine: LanguageModel = model.build()

    def describe(self) -> dict[str, Any]:
        """Sent with ``ready``."""
        return {"model": type(self.engine).__name__}

    async def handle(self, request: tuple[Any, ...], cancel: CancelToken) -> AsyncIterator[ReplyPiece | float]:
        """The reply's pieces (tool calls too when asked and the model can make them); for a request marked
        ``text_end``, the model's end-of-sentence estimate alone (nothing when it has none)."""
        messages, options, tools = request[:3]
        if request[3:] == ("text_end",):
            if (estimate := await self.engine.text_end(messages, options)) is not None:
                yield estimate
            return
        if tools and self.engine.capabilities.tools:
            pieces: AsyncIterator[ReplyPiece] = self.engine.stream_reply(messages, cancel=cancel, options=options)
        else:
            pieces = self.engine.stream(messages, cancel=cancel, options=options)
        async for piece in pieces:
            yield piece

    def notify(self, payload: tuple[list[ChatMessage], GenerationOptions]) -> None:
        """A prefill hint: queued on the model's own thread, where the model can prefill."""
        if self.engine.capabilities.prefill:
            self.engine.prefill(*payload)

    def summary(self) -> int:
        """Sent with each ``end``: how often the model fell back from non-finite logits."""
        return int(self.engine.nonfinite_fallbacks)
