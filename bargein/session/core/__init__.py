"""The pure turn core: the duplex machine, its vocabulary and settings, and the pure policies it uses.

Nothing here does I/O or reads a clock; ``from bargein.session import core`` gives the whole vocabulary.
"""

from bargein.session.core.client_requests import MIN_COMMIT_MS
from bargein.session.core.machine import DuplexMachine, IllegalTransition
from bargein.session.core.settings import Endpointing, Interruption, Listening, Speculation, TurnSettings
from bargein.session.core.vocabulary import *  # noqa: F403 - the machine's vocabulary is part of its interface

__all__ = ["MIN_COMMIT_MS", "DuplexMachine", "Endpointing", "IllegalTransition", "Interruption", "Listening",
           "Speculation", "TurnSettings"]
