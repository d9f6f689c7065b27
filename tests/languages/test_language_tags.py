"""Language tags beyond the two-letter codes: BCP 47 tags with a three-letter language, ISO 639-2 codes."""

from __future__ import annotations

import pytest

from bargein.languages import language, language_code, unsupported_language


@pytest.mark.parametrize("requested, code", [
    ("cmn-Hans-CN", "zh"), ("cmn-CN", "zh"), ("CMN_hans", "zh"), ("yue-HK", "yue"),
    ("eng", "en"), ("zho", "zh"), ("chi", "zh"), ("english-us", "en"),
    ("EN", "en"), ("zh-CN", "zh"), ("fr-FR", "fr"), ("xyz-ab", "xyz-ab"),
])
def test_language_tags_normalise(requested: str, code: str) -> None:
    assert language_code(requested) == code


def test_a_bcp47_mandarin_tag_is_mandarin_and_supported() -> None:
    # before: "cmn" was Mandarin but "cmn-Hans-CN" (Google's and Azure's spelling) was refused as unknown
    assert language("cmn-Hans-CN").code == "zh"
    assert unsupported_language("cmn-Hans-CN", frozenset({"en", "zh"})) is None
