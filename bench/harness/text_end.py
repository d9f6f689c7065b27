"""The embedded language model's estimate, from the words alone, that the user has finished (issue 43), offline.

What is read (:mod:`bargein.engines.think.text_end`, the one implementation the server's engine uses too): the
probability that the next token is a sentence-final mark or the end of the turn, after the system prompt and the
user's words with the recogniser's final marks stripped. The server reads it from the pause's speculative reply
(:meth:`~bargein.engines.think.llama_llm.LlamaLanguageModel.text_end`), whose prompt also holds the session's
instructions, tools and history; here the prompt is the default system prompt and the words alone
(``bench/quality/turn_words.py --text-end``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bargein.engines.think.llama_llm import DEFAULT_LLM
from bargein.engines.think.llm_models import resolve_gguf
from bargein.engines.think.llm_prompt import DEFAULT_SYSTEM_PROMPT
from bargein.engines.think.text_end import end_probability, estimate_words, final_token_mask


def finished_probabilities(texts: Iterable[str], model: str = DEFAULT_LLM) -> dict[str, float]:
    """Each distinct non-empty text's probability of a sentence-final mark or the end of the turn next."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(resolve_gguf(model)), n_ctx=512, n_batch=256, n_threads=2,
                          logits_all=True, verbose=False)
    finals = final_token_mask(llm)
    prefix = llm.tokenize(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n".encode(),
                          add_bos=False, special=True)
    llm.reset()  # type: ignore[no-untyped-call]
    llm.eval(prefix)
    primed = llm.n_tokens
    out: dict[str, float] = {}
    for text in texts:
        words = estimate_words(text)
        if not words or text in out:
            continue
        llm.n_tokens = primed  # the system prompt's evaluation is kept; only the words are evaluated
        llm.eval(llm.tokenize(words.encode(), add_bos=False, special=False))
        out[text] = end_probability(np.asarray(llm.scores[llm.n_tokens - 1]), finals)
    return out
