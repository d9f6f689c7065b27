"""The machine's event for function calls a client owes outputs for (the ``awaiting_tool`` phase).

The shell's pending-call book (:class:`bargein.session.tool_use.PendingCalls`) feeds it when the first call
starts waiting and when the last one is answered or times out; the machine only keeps the flag.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolWait:
    """Function calls the client owes outputs for now exist (``owed``), or every one was answered or timed out."""

    owed: bool
