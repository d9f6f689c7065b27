"""The language model's estimate, from the words alone, that the user's sentence is finished (issue 43).

LiveKit's turn detector reads the end of a turn from the text: the probability of the chat template's end-of-turn
token after the user's words. The embedded model (Qwen2.5-Coder 0.5B, not trained for this) almost never puts its
end token straight after unpunctuated words, so what is read here is the probability that the next token is a
sentence-final mark (``.`` ``?`` ``!``, with any closing quote) or the end of the turn, after the user's words with
the recogniser's final marks stripped. The embedded engine reads it from the prompt its speculative reply evaluates
anyway (:meth:`~bargein.engines.think.llama_llm.LlamaLanguageModel.text_end`: the prompt up to the user's last word,
one more read of logits), and ``bench/harness/text_end.py`` offline; both with the functions here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

_FINAL_MARKS = re.compile(r"[\s.?!,;:…]+$")
_MARK_TOKEN = re.compile(r"\s*[.?!]+[\s\"')]*")
END_OF_TURN_TOKEN = b"<|im_end|>"
"""The chat template's end of a message (ChatML, the packaged models'); counted as a final mark where it exists."""


def estimate_words(text: str) -> str:
    """The words whose continuation is estimated: ``text`` without the recogniser's trailing marks and spaces
    (Whisper puts a full stop after almost anything)."""
    return _FINAL_MARKS.sub("", text.strip())


def final_token_mask(llama: Any) -> npt.NDArray[np.bool_]:
    """Which tokens of ``llama``'s vocabulary end a sentence: a final mark with any closing quote or bracket, or the
    end of the message (about 0.3 s over Qwen's 152k tokens; computed once per model)."""
    finals = np.zeros(int(llama.n_vocab()), bool)
    for token in range(finals.shape[0]):
        piece = llama.detokenize([token]).decode("utf-8", "ignore")
        finals[token] = bool(piece) and _MARK_TOKEN.fullmatch(piece) is not None
    end = llama.tokenize(END_OF_TURN_TOKEN, add_bos=False, special=True)
    if len(end) == 1:
        finals[end[0]] = True
    return finals


def end_probability(logits: npt.ArrayLike, finals: npt.NDArray[np.bool_]) -> float:
    """The softmax mass of the ``finals`` tokens in one row of ``logits`` (non-finite logits give nothing: 1.0,
    the estimate that changes no endpoint)."""
    row = np.asarray(logits, dtype=np.float64)
    if not np.all(np.isfinite(row)):
        return 1.0
    weights = np.exp(row - row.max())
    return float(weights[finals].sum() / weights.sum())


def words_end(prompt: Sequence[int], words: Sequence[int]) -> int | None:
    """Where the last occurrence of the token run ``words`` ends in ``prompt`` (the prompt's tokens up to the user's
    last word are ``prompt[:end]``), or None when it is not there (the final mark merged with the last word, or
    the message was cut to fit)."""
    size = len(words)
    if not size:
        return None
    for start in range(len(prompt) - size, -1, -1):
        if list(prompt[start:start + size]) == list(words):
            return start + size
    return None
