"""The embedded language model's estimate, from the words alone, that the user has finished (issue 43, idea (b)).

LiveKit's turn detector reads the end of a turn from the text: the probability of the chat template's end-of-turn
token after the user's words. The embedded model (Qwen2.5-Coder 0.5B, not trained for this) almost never puts
its end token straight after unpunctuated words, so what is read here is the probability that the next token is a
sentence-final mark (``.`` ``?`` ``!``, with any closing quote) or the end of the turn, after the system prompt
and the user's words with the recogniser's final marks stripped. Offline only (``bench/quality/turn_words.py
--text-end``): the session does not compute it. Live it could come nearly free with the reply's speculative
prefill, whose prompt holds those words: one more row of logits in the same batch, read at the last word before
the mark, if the mark is its own token (docs/results/2026-12-05-turn-words-third-set.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from bargein.engines.think.llama_llm import DEFAULT_LLM
from bargein.engines.think.llm_models import resolve_gguf
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT

UNFINISHED_BELOW = 0.05
"""Under this the words read as unfinished: chosen on issue 43's training split (``--split train``; 0.02 gives the
same there, 0.1 and 0.2 catch 6 and 9 of the 10 cut-offs for 14 and 29 finished sentences): with the tiers, 5 of
95 paused sentences cut off instead of 10, and 9 of the 96 finished sentences wait the long tier for it."""
_FINAL_MARKS = re.compile(r"[\s.?!,;:…]+$")
_MARK_TOKEN = re.compile(r"\s*[.?!]+[\s\"')]*")


def finished_probabilities(texts: Iterable[str], model: str = DEFAULT_LLM) -> dict[str, float]:
    """Each distinct non-empty text's probability of a sentence-final mark or the end of the turn next."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(resolve_gguf(model)), n_ctx=512, n_batch=256, n_threads=2,
                          logits_all=True, verbose=False)
    end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    finals = np.zeros(llm.n_vocab(), bool)
    for token in range(llm.n_vocab()):
        piece = llm.detokenize([token]).decode("utf-8", "ignore")
        finals[token] = bool(piece) and _MARK_TOKEN.fullmatch(piece) is not None
    finals[end] = True
    prefix = llm.tokenize(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n".encode(),
                          add_bos=False, special=True)
    llm.reset()  # type: ignore[no-untyped-call]
    llm.eval(prefix)
    primed = llm.n_tokens
    out: dict[str, float] = {}
    for text in texts:
        words = _FINAL_MARKS.sub("", text.strip())
        if not words or text in out:
            continue
        llm.n_tokens = primed  # the system prompt's evaluation is kept; only the words are evaluated
        llm.eval(llm.tokenize(words.encode(), add_bos=False, special=False))
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        weights = np.exp(logits - logits.max())
        out[text] = float(weights[finals].sum() / weights.sum())
    return out
