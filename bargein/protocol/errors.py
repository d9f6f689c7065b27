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
