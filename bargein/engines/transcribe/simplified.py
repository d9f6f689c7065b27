"""Simplified Chinese for Whisper's Chinese output.

Whisper writes Chinese in Traditional characters about as often as in Simplified (its training
subtitles were both), whatever the prompt. A Mandarin session wants Simplified, so every Chinese
transcript goes through OpenCC's Traditional-to-Simplified tables (``opencc-python-reimplemented``,
Apache-2.0, pure Python, the tables inside the package). The tables hold phrases as well as characters,
so a Traditional character with several Simplified forms takes the one its word needs.
Without the package the text is returned as it is and the start-up log says so once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import cache

log = logging.getLogger(__name__)
_lock = threading.Lock()


@cache
def _converter() -> Callable[[str], str] | None:
    try:
        from opencc import OpenCC
    except ImportError:
        log.warning("opencc-python-reimplemented is not installed: Chinese transcripts stay as Whisper wrote "
                    "them (often Traditional); fix: pip install 'bargein[multilingual]'")
        return None
    converter = OpenCC("t2s")

    def convert(text: str) -> str:
        with _lock:  # the converter keeps state between calls; the recogniser's worker is one thread, tests more
            return str(converter.convert(text))

    return convert


def available() -> bool:
    """True when the Traditional-to-Simplified tables are installed."""
    return _converter() is not None


def to_simplified(text: str) -> str:
    """``text`` in Simplified characters (unchanged without the converter, and for non-Chinese text)."""
    convert = _converter()
    if convert is None or not text:
        return text
    return convert(text)
