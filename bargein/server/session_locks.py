"""Fields of a session that the backend which minted its client secret locked against the browser.

A backend mints a secret with, say, its instructions, ``tools: []`` and ``tool_choice: "none"``; without a
lock the browser holding the secret may replace all three with one ``session.update``. The minting call may
add (the official client passes it as ``extra_body``)::

    "bargein": {"locked": ["instructions", "tools", "tool_choice"], "hide_locked": true}

A session opened with that secret then refuses, with a ``session_field_locked`` error, any ``session.update``
that would change a locked field (the whole update: nothing of it is applied, so the field keeps its value;
one that repeats the same value, as some SDKs resend their whole configuration, passes; one that changes a
locked field through another, as a new language brings its default instructions, does not) and any
``response.create`` that overrides one for a reply. Locking ``instructions`` also refuses ``system`` messages
from the client, which would otherwise stand in for them. With ``hide_locked`` the locked fields are left out of
``session.created`` and ``session.updated`` as the browser receives them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.session_config import SessionConfig

LOCKED_CODE = "session_field_locked"
LOCKABLE = frozenset(SessionConfig.model_fields) - {"type"}
"""Top-level session fields a backend may lock (``audio`` locks all of the audio settings)."""
RESPONSE_OVERRIDES = ("instructions", "output_modalities", "max_output_tokens", "tools", "tool_choice", "audio")
"""Fields a ``response.create`` may override for one reply, by their session names."""
SESSION_EVENTS = frozenset({"session.created", "session.updated"})


class LockRequest(BaseModel):
    """The ``bargein`` object of ``POST /v1/realtime/client_secrets``."""

    model_config = ConfigDict(extra="forbid")
    locked: list[str] = Field(default_factory=list, max_length=len(LOCKABLE))
    hide_locked: bool = False
    memory_scope: str | None = Field(None, pattern=r"^[A-Za-z0-9._:@-]{1,128}$")
    """Whose long-term memories the session reads and writes (the backend's user id; docs/memory.md)."""

    @field_validator("locked")
    @classmethod
    def _lockable(cls, fields: list[str]) -> list[str]:
        unknown = sorted(set(fields) - LOCKABLE)
        if unknown:
            raise ValueError(f"cannot lock {', '.join(unknown)}: lock any of {', '.join(sorted(LOCKABLE))}")
        return fields


@dataclass(frozen=True)
class SessionLocks:
    """What a session's client secret locked, and whether the locked fields are hidden from its client."""

    locked: frozenset[str] = frozenset()
    hidden: bool = False
    memory_scope: str | None = None
    """The scope the minting backend bound (None: the session remembers nothing)."""

    @classmethod
    def of(cls, request: LockRequest | None) -> SessionLocks:
        """The locks a minting request asked for (none without a ``bargein`` object)."""
        return cls() if request is None else cls(frozenset(request.locked), request.hide_locked, request.memory_scope)

    def as_json(self) -> dict[str, Any]:
        """The form stored beside the bound configuration."""
        return {"locked": sorted(self.locked), "hide_locked": self.hidden, "memory_scope": self.memory_scope}

    def check(self, message: ce.ClientEvent, config: SessionConfig) -> None:
        """Raise ``session_field_locked`` if ``message`` would change a locked field of ``config``."""
        if not self.locked:
            return
        changed: list[str] = []
        if isinstance(message, ce.SessionUpdate):
            changed = self._session_changes(message, config)
        elif isinstance(message, ce.ResponseCreate) and message.response is not None:
            changed = [name for name in RESPONSE_OVERRIDES if name in self.locked
                       and getattr(message.response, name) is not None
                       and _plain(getattr(message.response, name)) != _plain(getattr(config, name, None))]
            if "instructions" in self.locked and any(_system_message(spec) for spec in message.response.input or ()):
                changed.append("instructions (a system message in response.input)")
        elif isinstance(message, ce.ConversationItemCreate) and "instructions" in self.locked \
                and _system_message(message.item):
            changed = ["instructions (a system message)"]
        if changed:
            raise ProtocolError(f"locked by the client secret's backend: {', '.join(changed)}; nothing was changed",
                                code=LOCKED_CODE, param=changed[0].split(" ")[0], event_id=message.event_id)

    def _session_changes(self, message: ce.SessionUpdate, config: SessionConfig) -> list[str]:
        touched = sorted(self.locked & set(message.session))
        try:  # the whole update: one field may move another (a new language brings its default instructions)
            updated = config.updated(message.session)
        except (ValidationError, ValueError):  # the update is refused anyway; judge the locked fields it names
            try:
                updated = config.updated({name: message.session[name] for name in touched})
            except (ValidationError, ValueError):  # an invalid value of a locked field is a change all the same
                return touched
        return [name for name in sorted(self.locked)
                if _plain(getattr(updated, name)) != _plain(getattr(config, name))]

    def visible(self, wire: str, event_type: str, event: dict[str, Any]) -> str:
        """``wire`` as the client may see it: hidden locked fields left out of the session events."""
        if not (self.hidden and self.locked) or event_type not in SESSION_EVENTS:
            return wire
        session = {key: value for key, value in event.get("session", {}).items() if key not in self.locked}
        return json.dumps({**event, "session": session}, separators=(",", ":"))


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _system_message(spec: Any) -> bool:
    return isinstance(spec, ce.MessageItem) and spec.role == "system"
