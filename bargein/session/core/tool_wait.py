"""The tool wait: function calls a client owes outputs for (the ``awaiting_tool`` phase), the event that says so
and the machine's sub-state that keeps it.

The shell's pending-call book (:class:`bargein.session.tool_use.PendingCalls`) feeds the event when the first call
starts waiting and when the last one is answered or times out; the machine only keeps the flag.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolWait:
    """Function calls the client owes outputs for now exist (``owed``), or every one was answered or timed out."""

    owed: bool


@dataclass
class ToolOutputs:
    """The machine's tool wait: ``owed`` while the client owes function call outputs (the session waits on it and
    is not idle: no idle prompt is armed), else none owed."""

    owed: bool = False
