"""The words bench's policies: the tiers as the server runs them (the text end-of-turn estimate at the plain and the
short tier, read offline), and the estimate at the plain tier only (the rule before)."""

from __future__ import annotations

import pytest

from bargein.session.core.endpointing import DEFAULT_TIERS
from bench.harness.endpoint_runs import SilenceRun
from bench.quality.turn_words import Tiered, TieredWithTextEnd, TieredWithTextEndPlainOnly

SURE_FINISHED = SilenceRun(1000.0, 900.0, 0.98, "Can you tell me the weather for Friday?", 0.96)
TIDIED = SilenceRun(1000.0, 900.0, 0.82, "Can you tell me?", 0.97)


@pytest.mark.parametrize(("run", "finished", "wanted"), [
    (TIDIED, {"Can you tell me?": 0.0004}, DEFAULT_TIERS.long_ms),  # read as unfinished: the long tier
    (TIDIED, {"Can you tell me?": 0.3}, 500),  # read as finished: the tiers as they are
    (TIDIED, {}, 500),  # no estimate: the tiers as they are
    (SURE_FINISHED, {SURE_FINISHED.words: 0.4}, DEFAULT_TIERS.short_ms),
    (SURE_FINISHED, {SURE_FINISHED.words: 0.01}, DEFAULT_TIERS.short_ms),  # the plain tier only: not over the short
])
def test_the_text_end_at_the_plain_tier_turns_unfinished_words_into_the_long_tier(
        run: SilenceRun, finished: dict[str, float], wanted: int) -> None:
    assert Tiered("tiers", 0.0, 0, 0).wait_ms(run) == (DEFAULT_TIERS.short_ms if run is SURE_FINISHED else 500)
    assert TieredWithTextEndPlainOnly("text", 0.0, 0, 0, finished=finished).wait_ms(run) == wanted


def test_the_servers_rule_overrules_the_short_tier_too() -> None:
    finished = {SURE_FINISHED.words: 0.01}
    assert TieredWithTextEnd("server", 0.0, 0, 0, finished=finished).wait_ms(SURE_FINISHED) == DEFAULT_TIERS.long_ms
    assert TieredWithTextEnd("server", 0.0, 0, 0, finished={TIDIED.words: 0.0004}).wait_ms(TIDIED) == \
        DEFAULT_TIERS.long_ms, "and the plain one"
    assert TieredWithTextEnd("server", 0.0, 0, 0, finished={SURE_FINISHED.words: 0.4}).wait_ms(SURE_FINISHED) == \
        DEFAULT_TIERS.short_ms, "read as finished: the short tier stands"
