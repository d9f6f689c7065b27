"""What the machine's transition modules (:mod:`~bargein.session.core.voice_activity`,
:mod:`~bargein.session.core.listening_decisions`, :mod:`~bargein.session.core.client_requests`) may read and change
of the duplex machine: its sub-states and the steps of the live reply's life. A protocol, so that those modules
need not import the machine that dispatches to them (no import circle); :class:`~bargein.session.core.machine.
DuplexMachine` is the one implementation, and its module's header says what each sub-state's states are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from bargein.protocol.client_events import ResponseParams
from bargein.session.core import vocabulary as v
from bargein.session.core.idle_prompt import IdlePrompt
from bargein.session.core.listening.segment_book import SegmentBook
from bargein.session.core.onset_hold import OnsetHold
from bargein.session.core.partials import Partials
from bargein.session.core.settings import TurnSettings
from bargein.session.core.storm_guard import StormGuard
from bargein.session.core.tool_wait import ToolOutputs
from bargein.session.core.turn_records import Reply, Turn
from bargein.session.core.verdicts import AwaitedVerdicts


class MachineState(Protocol):
    """The duplex machine as its transitions see it (the members are documented on the machine)."""

    settings: TurnSettings
    storm: StormGuard
    segments: SegmentBook
    turn: Turn | None
    reply: Reply | None
    awaiting: AwaitedVerdicts
    answer_owed: bool
    idle: IdlePrompt
    tools: ToolOutputs
    partials: Partials
    hold: OnsetHold
    last_ms: float
    heard_from_ms: float

    @property
    def new_id(self) -> Callable[[str], str]:
        """Supplies item and response ids."""

    @property
    def over_reply(self) -> bool:
        """Speech now is spoken over the agent."""

    @property
    def user_busy(self) -> bool:
        """The user is speaking, or a segment of theirs is being judged."""

    @property
    def wants_onset_probe(self) -> bool:
        """The half-hop VAD stream runs now (the half-hop onset is on and a reply is live)."""

    def emit(self, action: v.Action) -> None:
        """Queue an action."""

    def maybe_answer(self) -> None:
        """Start the answer owed once nothing stands in its way, else arm the idle prompt owed."""

    def start_reply(self, trigger: Literal["turn_detected", "client", "idle_timeout"],
                    params: ResponseParams | None = None) -> None:
        """A reply starts."""

    def tell_speech(self) -> None:
        """The turn being spoken, held back from the client, is told now."""

    def pause(self, reply: Reply, turn: Turn) -> None:
        """The user's turn pauses the live reply."""

    def resume(self, reply: Reply) -> None:
        """The paused reply goes on."""

    def complete(self, reply: Reply, *, failed: bool) -> None:
        """The live reply ended by itself."""

    def cancel_active(self, reason: Literal["turn_detected", "client_cancelled"]) -> None:
        """The live reply is cancelled."""

    def barge_in(self) -> None:
        """The user cut the reply short (counted by the storm guard)."""

    def idle_again(self) -> None:
        """The agent owes nothing: the idle prompt is armed, or owed."""
