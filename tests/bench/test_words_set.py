"""Issue 43's held-out set: deterministic from its seed, and disjoint from everything fitted (texts and voices)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from bench.harness.question_clips import SYNTHESISED_QUESTIONS
from testdata import endpoint_set, make_family_set, make_listening_set
from testdata.endpoint_clips import HELD_OUT_VOICES
from testdata.make_family_set import SPLIT_FILE
from testdata.make_words_set import OVER_REPLY, PAUSED, SEED, VOICES, build_over_reply, build_pauses
from testdata.words_splits import FIFTH, FOURTH, FRESH, ISSUE_43, SPLITS, THIRD, TRAIN, WordsSplit


def _plain(text: str) -> str:
    return " ".join(re.findall(r"[a-z']+", text.lower()))


def _fitted_texts() -> set[str]:
    """Every text of the sets the listening policy and the endpoint tiers were fitted or shaped on."""
    texts: list[str] = [*make_family_set.COMMANDS, *make_family_set.QUERIES, *make_family_set.BACKCHANNELS,
                        *make_family_set.VOCALS, *make_family_set.RECORDED_COMMANDS, *make_listening_set.QUERIES,
                        *make_listening_set.BACKCHANNELS, *make_listening_set.VOCALS,
                        *(" ".join(parts) for parts in make_listening_set.SPLIT_QUERIES),
                        *(s.replace("|", " ") for s in endpoint_set.SENTENCES),
                        *(text for _, text in SYNTHESISED_QUESTIONS)]
    return {_plain(t) for t in texts}


def test_the_sentences_are_new() -> None:
    fitted = _fitted_texts()
    ours = [t for texts in OVER_REPLY.values() for t in texts] + [s.replace("|", " ") for s in PAUSED]
    assert len(ours) == len(set(ours))
    assert not {_plain(t) for t in ours} & fitted
    assert all("|" in s for s in PAUSED), "every paused sentence has its hesitation marked"


def test_the_voices_were_never_fitted_on() -> None:
    table = json.loads(SPLIT_FILE.read_text())
    assert not set(VOICES) & set(table["train"])
    assert set(VOICES) - {"espeak-classic"} <= set(table["held_out"])
    assert not {v.split("-", 1)[1] for v in VOICES if v.startswith("flite-")} - HELD_OUT_VOICES, \
        "the endpoint tiers were fitted on the other flite voices"
    assert not any(v.startswith(("kokoro", "espeak-us", "espeak-gb")) for v in VOICES)


def _texts(split: WordsSplit) -> set[str]:
    return {_plain(t) for texts in split.over_reply.values() for t in texts} | {
        _plain(s.replace("|", " ")) for s in split.paused}


def test_every_split_has_its_own_new_texts_and_seed() -> None:
    fitted = _fitted_texts()
    splits = list(SPLITS.values())
    assert len({s.seed for s in splits}) == len(splits) and len({s.folder for s in splits}) == len(splits)
    for split in splits:
        assert set(split.over_reply) == set(OVER_REPLY), split.name
        assert not _texts(split) & fitted, split.name
        assert all("|" in s for s in split.paused), split.name
        for other in splits:
            assert other is split or not _texts(split) & _texts(other), (split.name, other.name)


def test_the_study_split_is_training_families_and_the_fresh_set_is_not() -> None:
    table = json.loads(SPLIT_FILE.read_text())
    assert set(TRAIN.voices) <= set(table["train"]) and set(TRAIN.talkers) <= set(table["background_talkers"]["train"])
    assert not set(FRESH.voices) & set(table["train"])
    assert set(FRESH.voices) - {"espeak-classic-new"} <= set(table["held_out"])
    assert set(FRESH.talkers) <= set(table["background_talkers"]["held_out"])


def test_the_third_set_speaks_in_voices_no_earlier_split_used() -> None:
    table = json.loads(SPLIT_FILE.read_text())
    earlier = {v for split in (ISSUE_43, TRAIN, FRESH) for v in split.voices}
    assert not set(THIRD.voices) & (earlier | set(table["train"]) | set(table["held_out"]))
    assert set(THIRD.talkers) <= set(table["background_talkers"]["held_out"])


def test_the_fourth_set_speaks_in_voices_and_variants_no_earlier_split_used() -> None:
    from testdata.make_words_set import NAMED_NG_VARIANTS, NEW_NG_VARIANTS, voice
    from testdata.voices import FAMILIES

    table = json.loads(SPLIT_FILE.read_text())
    earlier = {v for split in (ISSUE_43, TRAIN, FRESH, THIRD) for v in split.voices}
    assert not set(FOURTH.voices) & (earlier | set(table["train"]) | set(table["held_out"]))
    assert all(voice(name).name == name for name in FOURTH.voices)
    assert not set(NAMED_NG_VARIANTS) & set(NEW_NG_VARIANTS), "the third set's eSpeak NG variants are not drawn again"
    assert set(FOURTH.talkers) <= set(table["background_talkers"]["held_out"]) and "espeak-us" in FAMILIES


def _digest(folder: Path) -> str:
    hashes = hashlib.sha256()
    for path in sorted(folder.glob("*.wav")):
        hashes.update(path.name.encode() + path.read_bytes())
    return hashes.hexdigest()


@pytest.mark.skipif(not (shutil.which("flite") and shutil.which("espeak")), reason="flite and espeak make the voices")
def test_the_set_is_deterministic_from_its_seed(tmp_path: Path) -> None:
    voices = ("flite-slt", "espeak-classic")
    for run in ("a", "b"):
        build_over_reply(tmp_path / run / "over_reply", voices=voices, limit=1)
        build_pauses(tmp_path / run / "pauses", voices=voices, limit=1)
    assert _digest(tmp_path / "a" / "over_reply") == _digest(tmp_path / "b" / "over_reply")
    assert _digest(tmp_path / "a" / "pauses") == _digest(tmp_path / "b" / "pauses")
    other = build_over_reply(tmp_path / "c", voices=voices, limit=1, seed=SEED + 1)
    assert _digest(tmp_path / "c") != _digest(tmp_path / "a" / "over_reply"), "the seed draws the mix"
    assert {c.category for c in other} == set(OVER_REPLY)


@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("espeak")), reason="eSpeak makes the voices")
def test_the_third_set_is_deterministic_from_its_seed(tmp_path: Path) -> None:
    voices = ("espeak-ng-caribbean", "espeak-classic-plain")
    for run in ("a", "b"):
        build_pauses(tmp_path / run, split=THIRD, voices=voices, limit=1)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert len(list((tmp_path / "a").glob("*.wav"))) == 4, "both voices say the sentence whole and paused"


@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("espeak")), reason="eSpeak makes the voices")
def test_the_fourth_set_is_deterministic_from_its_seed(tmp_path: Path) -> None:
    voices = ("espeak-ng-scotland", "espeak-classic-klatt-rp")
    for run in ("a", "b"):
        build_pauses(tmp_path / run, split=FOURTH, voices=voices, limit=1)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert len(list((tmp_path / "a").glob("*.wav"))) == 4, "both voices say the sentence whole and paused"


def test_the_fifth_set_shares_no_sentence_and_no_voice_with_the_other_splits() -> None:
    from testdata.make_words_set import voice
    from testdata.voices import FAMILIES

    table = json.loads(SPLIT_FILE.read_text())
    others = [split for split in SPLITS.values() if split is not FIFTH]
    assert len(FIFTH.paused) == 48 and all(len(texts) == 8 for texts in FIFTH.over_reply.values())
    for other in others:
        assert not _texts(FIFTH) & _texts(other), other.name
        assert not set(FIFTH.voices) & set(other.voices), other.name
    engines = {voice(name).engine for split in others for name in split.voices} | {f.engine for f in FAMILIES.values()}
    assert {voice(name).engine for name in FIFTH.voices} == {"piper"} and "piper" not in engines
    assert not set(FIFTH.voices) & (set(table["train"]) | set(table["held_out"]))
    assert set(FIFTH.talkers) <= set(table["background_talkers"]["held_out"])


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="eSpeak NG writes the Piper voice's phonemes")
def test_the_fifth_set_is_deterministic_from_its_seed(tmp_path: Path) -> None:
    for run in ("a", "b"):
        build_pauses(tmp_path / run, split=FIFTH, limit=1)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert len(list((tmp_path / "a").glob("*.wav"))) == 2, "the voice says the sentence whole and paused"
