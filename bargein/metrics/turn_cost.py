"""What a turn cost, and what of it nobody heard: the cost half of the per-turn ledger.

A turn's CPU seconds per stage come from the bills its engine calls charged (:mod:`bargein.metrics.cost_meter`:
measured by the worker processes per request, on the calling thread for the in-process VAD and end-of-turn
model, and per step on the event loop for the session's own work, the ``session`` stage,
:mod:`bargein.metrics.loop_cpu`); its tokens from the reply's pipeline (``tokens`` generated; ``prompt_tokens``
and ``cached_tokens``, the prompt's tokens whose KV cache was reused, where the model tells them); its audio from
the stream (the user's speech in) and the socket (the agent's audio sent).

**Waste** is what a barge-in made worthless: the audio sent but never heard (sent minus heard, both measured), and
the generated tokens in the same proportion as the audio (a reply's tokens are spoken in order, so the unheard
share of its audio is the unheard share of its words; a reply cut before any audio was heard wasted all of them).
A reply that was not cut wastes nothing. **Speculative work thrown away** is the CPU of the guessed recognitions
and prefetched replies started for the turn that were discarded (the user spoke on, or the reply's prompt came out
different), and the tokens those replies had generated. CPU charged after the turn was reported (a cancelled
reply's last clause finishing in its worker) counts in the session's totals, not in the turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bargein.metrics.cost_meter import STAGES, Speculative

MAX_SPECULATIVE = 32
"""Speculative jobs kept per turn (a turn has a guess per pause; more are left out of its waste)."""


@dataclass
class TurnCost:
    """The CPU seconds per stage a turn's engine calls were charged."""

    cpu_s: dict[str, float] = field(default_factory=dict)
    speculative: list[Speculative] = field(default_factory=list)
    """The speculative jobs started for the turn."""

    def add(self, stage: str, cpu_s: float) -> None:
        """Charge ``cpu_s`` of ``stage``."""
        self.cpu_s[stage] = self.cpu_s.get(stage, 0.0) + cpu_s

    def speculating(self, work: Speculative) -> None:
        """A speculative job billed this turn."""
        if len(self.speculative) < MAX_SPECULATIVE and all(known is not work for known in self.speculative):
            self.speculative.append(work)

    def speculation_wasted(self) -> dict[str, float]:
        """The CPU and tokens of the turn's speculative jobs that were thrown away."""
        thrown = [work for work in self.speculative if work.discarded]
        return {"speculative_cpu_s": round(sum(work.cpu_s for work in thrown), 4),
                "speculative_tokens": float(sum(work.tokens for work in thrown))}


def waste(counters: dict[str, float], *, cut: bool, heard_s: float | None = None) -> dict[str, float]:
    """The tokens and audio seconds of a reply nobody heard (module docstring); ``heard_s`` overrides the heard
    audio the counters hold (the final figure, told later)."""
    sent = counters.get("audio_sent_s", 0.0)
    heard = counters.get("audio_heard_s", 0.0) if heard_s is None else heard_s
    if not cut:
        return {"tokens": 0.0, "audio_s": 0.0}
    unheard = max(0.0, sent - heard)
    share = unheard / sent if sent > 0 else 1.0
    return {"tokens": round(counters.get("tokens", 0.0) * share, 1), "audio_s": round(unheard, 3)}


def cost_fields(cost: TurnCost, counters: dict[str, float], speech_s: float | None, *,
                cut: bool) -> dict[str, Any]:
    """The ``bargein.turn.cost`` event's fields (besides the turn's ids)."""
    return {
        "cpu_s": {stage: round(cost.cpu_s.get(stage, 0.0), 4) for stage in STAGES if stage in cost.cpu_s},
        "tokens": {"prompt": int(counters.get("prompt_tokens", 0)), "cached": int(counters.get("cached_tokens", 0)),
                   "generated": int(counters.get("tokens", 0))},
        "audio_in_s": round(speech_s, 3) if speech_s is not None else None,
        "audio_out_s": round(counters.get("audio_sent_s", 0.0), 3),
        "waste": {**waste(counters, cut=cut), **cost.speculation_wasted()},
    }


class SessionCost:
    """A session's totals: CPU per stage (late charges included), tokens, audio, waste. Bounded: a few numbers.
    A session's counts reach ``parent`` too (the process's totals, :data:`PROCESS_COST`, for the ledger export)."""

    def __init__(self, parent: SessionCost | None = None) -> None:
        self.cpu_s: dict[str, float] = {}
        self.totals: dict[str, float] = {}
        self.parent = parent

    def add(self, name: str, value: float) -> None:
        """Add to one total (and the parent's)."""
        self.totals[name] = self.totals.get(name, 0.0) + float(value)
        if self.parent is not None:
            self.parent.add(name, value)

    def charge(self, stage: str, cpu_s: float) -> None:
        """Every charge of the session, whichever turn it was for."""
        self.cpu_s[stage] = self.cpu_s.get(stage, 0.0) + cpu_s

    def count(self, fields: dict[str, Any]) -> None:
        """Add a reported turn's tokens, audio and waste."""
        for name, value in (("prompt_tokens", fields["tokens"]["prompt"]),
                            ("cached_tokens", fields["tokens"]["cached"]),
                            ("generated_tokens", fields["tokens"]["generated"]),
                            ("audio_in_s", fields["audio_in_s"] or 0.0), ("audio_out_s", fields["audio_out_s"]),
                            ("wasted_tokens", fields["waste"]["tokens"]),
                            ("wasted_audio_s", fields["waste"]["audio_s"]),
                            ("wasted_speculative_cpu_s", fields["waste"]["speculative_cpu_s"]),
                            ("wasted_speculative_tokens", fields["waste"]["speculative_tokens"]), ("turns", 1)):
            self.add(name, value)

    def summary(self) -> dict[str, Any]:
        """The session's ledger as it stands."""
        return {"cpu_s": {stage: round(value, 4) for stage, value in self.cpu_s.items()},
                **{name: round(value, 3) for name, value in self.totals.items()}}


PROCESS_COST = SessionCost()
"""Every session's counts in this process since it started (its CPU per stage is :data:`~.cost_meter.STAGE_CPU`)."""
