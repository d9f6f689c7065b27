"""Start-up work that the first session would otherwise pay for, done before the server reports ready.

Each engine warms itself when it loads (one recognition, one synthesis per voice, one tiny reply), but
the first real turn of a default session still found two things cold: the LLM had never seen the default
session's prompt (its instructions and the built-in tools' schemas, hundreds of tokens: seconds of prompt
evaluation on two cores, measured as a 6 to 21 s first turn), and the end-of-turn model had never run.
:func:`warm_first_turn` runs both for real and waits for them, so the prompt's evaluated prefix is in the
LLM's cache when the first session starts.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from bargein.engines.base import Engines
from bargein.engines.think.tool_calls import reply_pieces
from bargein.protocol.session_config import SessionConfig
from bargein.session.tool_use import tool_setup
from bargein.tools.registry import ToolRegistry
from bargein.values import LISTEN_SAMPLE_RATE, CancelToken, ChatMessage, GenerationOptions

log = logging.getLogger(__name__)
WARM_UP_TIMEOUT_S = 180.0
"""Longest the start-up waits for the warm-up; past it the server starts anyway (the first turn is then slow)."""


async def warm_first_turn(engines: Engines, builtins: ToolRegistry | None, *,
                          timeout_s: float = WARM_UP_TIMEOUT_S) -> float:
    """Evaluate a default session's prompt up to the reply's first token and score one silence with the
    end-of-turn model; returns the seconds it took. A failure is logged, never raised: the engines' own
    health checks deal with a broken engine, and a cold first turn is no reason to refuse to start."""
    started = time.perf_counter()
    try:
        await asyncio.wait_for(_warm(engines, builtins), timeout_s)
    except Exception as error:
        log.warning("warm-up of the first turn failed (%s: %s); the first turn may be slow",
                    type(error).__name__, error)
    return time.perf_counter() - started


async def _warm(engines: Engines, builtins: ToolRegistry | None) -> None:
    config = SessionConfig()
    options = tool_setup(config, None, builtins).apply(GenerationOptions(max_tokens=1))
    messages = [ChatMessage("system", config.instructions), ChatMessage("user", "Hello.")]
    # through the same call a reply makes, so the prompt is rendered exactly as the first turn's will be
    async for _piece in reply_pieces(engines.llm, messages, cancel=CancelToken(), options=options):
        pass
    if engines.turn is not None:
        await engines.turn.probability(np.zeros(LISTEN_SAMPLE_RATE, np.float32))
