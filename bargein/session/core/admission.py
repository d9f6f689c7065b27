"""Which reply's output may reach the client: only the active reply's, and only while it is not paused.

Pure: the machine says which reply is active and whether it is paused; this maps a piece of output to
what the shell does with it (send it, hold it for a resume, or drop it).
"""

from __future__ import annotations

from typing import Literal

from bargein.session.core import vocabulary as v

Admission = Literal["forward", "hold", "drop"]


def admission(active_id: str | None, paused: bool, response_id: str) -> Admission:
    """What may happen to output of ``response_id`` while ``active_id`` is the active reply (``None``: none)."""
    if active_id is None or active_id != response_id:
        return "drop"
    return "hold" if paused else "forward"


def admit(output: v.ReplyAudio | v.ReplyText, how: Admission) -> v.Action:
    """The action that carries out ``how`` for one piece of a reply's output."""
    if isinstance(output, v.ReplyAudio):
        audio: dict[Admission, v.Action] = {"forward": v.ForwardAudio(output.response_id, output.payload),
                                            "hold": v.HoldAudio(output.response_id, output.payload),
                                            "drop": v.DropAudio(output.response_id)}
        return audio[how]
    words: dict[Admission, v.Action] = {"forward": v.ForwardText(output.response_id, output.text),
                                        "hold": v.HoldText(output.response_id, output.text),
                                        "drop": v.DropText(output.response_id)}
    return words[how]
