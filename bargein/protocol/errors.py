"""Protocol errors: each becomes one ``error`` event and the session lives on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorType = Literal["invalid_request_error", "server_error"]


@dataclass
class ProtocolError(Exception):
    """A client event the server cannot honour, described for the ``error`` event."""

    message: str
    code: str = "invalid_request_error"
    param: str | None = None
    event_id: str | None = None
    type: ErrorType = "invalid_request_error"

    def __str__(self) -> str:
        return self.message


class EngineFailure(ProtocolError):
    """An engine raised while serving a response; reported as ``server_error``."""

    def __init__(self, message: str, *, code: str = "engine_error") -> None:
        super().__init__(message=message, code=code, type="server_error")


def fallback_error(response_id: str, code: str, reason: str) -> ProtocolError:
    """The ``error`` sent when a reply's text is a failed stage's stand-in (the LLM's spoken apology); ``code``
    names the stage (``llm_unavailable``), ``reason`` says what failed.

    A ``server_error`` with no ``event_id``, sent while the response is in progress: the Agents SDK surfaces
    it as a ``RealtimeError`` and goes on, and it names no ``response.create``, which that SDK would take for
    a refused one. The response still completes, with the apology spoken.
    """
    return ProtocolError(f"response {response_id}: {reason}; the reply is, or ends with, a spoken apology",
                         code=code, type="server_error")
