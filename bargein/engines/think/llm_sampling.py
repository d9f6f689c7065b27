"""Token sampling for the embedded language model, with a guard against broken logits.

A quantised model on an unusual CPU path can, rarely, produce NaN or +inf logits. Softmax over those
yields NaN probabilities and a sampler would then pick garbage (or crash). The guard here notices the
distribution is not usable, picks the greedy token among the values that still make sense, and says
so, so the caller can count it. ``-inf`` alone is *not* a fault: it is how a token is masked out.

Pure numpy, no model: the guard is unit-tested with fake logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SamplingParams:
    """The knobs of one reply's sampler."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.9
    repeat_penalty: float = 1.1
    """Divides positive (multiplies negative) logits of recent tokens: tiny models loop without it."""
    repeat_window: int = 64


@dataclass(frozen=True)
class Pick:
    """The sampler's choice: a token id (``None`` if no token is usable) and whether the guard stepped in."""

    token: int | None
    fell_back: bool


def is_usable(logits: Logits) -> bool:
    """True when softmax over ``logits`` is well defined: no NaN, no +inf, at least one finite value."""
    if np.isnan(logits).any() or np.isposinf(logits).any():
        return False
    return bool(np.isfinite(logits).any())


def greedy_fallback(logits: Logits) -> int | None:
    """The most plausible token of a broken distribution.

    NaN entries carry no information and are ignored; a +inf entry is read as "certain" and wins
    (the first one, for determinism); otherwise the largest finite logit. ``None`` when every entry
    is NaN or -inf, so generation should end rather than emit an arbitrary token.
    """
    positive_inf = np.flatnonzero(np.isposinf(logits))
    if positive_inf.size:
        return int(positive_inf[0])
    finite = np.isfinite(logits)
    if not finite.any():
        return None
    cleaned = np.where(finite, logits, -np.inf)
    return int(np.argmax(cleaned))


def apply_repeat_penalty(logits: Logits, recent: npt.NDArray[np.intc], penalty: float) -> Logits:
    """A copy of ``logits`` with recently produced tokens made less likely (CTRL-style penalty)."""
    if penalty == 1.0 or recent.size == 0:
        return logits
    out = logits.copy()
    ids = np.unique(recent)
    values = out[ids]
    out[ids] = np.where(values > 0, values / penalty, values * penalty)
    return out


def sample(logits: Logits, params: SamplingParams, rng: np.random.Generator,
           recent: npt.NDArray[np.intc] | None = None) -> Pick:
    """Pick the next token: guard, repeat penalty, then greedy (temperature <= 0) or top-k/top-p sampling."""
    if not is_usable(logits):
        return Pick(greedy_fallback(logits), fell_back=True)
    if recent is not None:
        logits = apply_repeat_penalty(logits, recent[-params.repeat_window:], params.repeat_penalty)
    if params.temperature <= 0.0:
        return Pick(int(np.argmax(logits)), fell_back=False)
    k = min(max(params.top_k, 1), logits.shape[0])
    # argpartition keeps the k best without sorting the whole vocabulary (150k entries for Qwen).
    candidates = np.argpartition(logits, -k)[-k:]
    candidates = candidates[np.argsort(logits[candidates])[::-1]]
    scaled = logits[candidates].astype(np.float64) / params.temperature
    scaled -= scaled[0]
    probs = np.exp(scaled)
    probs /= probs.sum()
    if params.top_p < 1.0:
        # Keep the smallest head whose mass reaches top_p (always at least the best token).
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
        candidates, probs = candidates[:keep], probs[:keep]
        probs /= probs.sum()
    return Pick(int(rng.choice(candidates, p=probs)), fell_back=False)
