"""Where the Smart Turn end-of-turn model comes from: one file taken out of a pinned wheel.

Smart Turn v3.2 (BSD-2, by Daily) ships inside the ``pipecat-ai`` wheel. bargein does not install
Pipecat's runtime for it: set-up downloads the pinned wheel without its dependencies, takes the one
ONNX file out with :mod:`zipfile`, checks its sha256 and keeps it in bargein's models cache. Start-up
re-checks the cached file and refuses a missing or altered one with the fix.

Run ``python -m bargein.engines.listen.smart_turn_file`` to fetch it (``scripts/setup.sh`` does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bargein.weights import WeightError, cache_dir, downloaded_wheel, extract_pinned, verify_sha256

SMART_TURN_FILENAME = "smart-turn-v3.2-cpu.onnx"
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SMART_TURN_DISTRIBUTION = "pipecat-ai==1.14.0"
"""The wheel that carries the file; downloaded with ``--no-deps`` and never installed."""
SMART_TURN_MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
FETCH_COMMAND = "python -m bargein.engines.listen.smart_turn_file"
"""The fix printed when the file is missing or altered (``scripts/setup.sh`` runs it too)."""


def smart_turn_path(directory: Path | None = None) -> Path:
    """The cached model file, verified; raises :class:`WeightError` naming the file, package and fix."""
    path = (directory or cache_dir()) / SMART_TURN_FILENAME
    fix = f"{FETCH_COMMAND} (or scripts/setup.sh)"
    if not path.is_file():
        raise WeightError(
            f"the end-of-turn model {path} is missing (it comes from the {SMART_TURN_DISTRIBUTION} wheel, "
            f"{SMART_TURN_MEMBER}); fix: {fix}"
        )
    verify_sha256(path, SMART_TURN_SHA256,
                  fix=f"delete {path} and run {FETCH_COMMAND} to take it again from {SMART_TURN_DISTRIBUTION}")
    return path


def extract_from_wheel(wheel: Path, directory: Path | None = None) -> Path:
    """Take the model out of a downloaded wheel into the cache, refusing it unless the hash matches.

    The file is written under a temporary name and renamed only once verified, so an interrupted or
    altered extraction never leaves a file that looks finished.
    """
    return extract_pinned(wheel, SMART_TURN_MEMBER, SMART_TURN_SHA256,
                          (directory or cache_dir()) / SMART_TURN_FILENAME, fetch_command=FETCH_COMMAND)


def fetch(directory: Path | None = None, wheel_dir: Path | None = None) -> Path:
    """Make sure the verified model is in the cache: download the pinned wheel (no dependencies) if needed."""
    try:
        return smart_turn_path(directory)
    except WeightError:
        pass
    wheels = wheel_dir or (directory or cache_dir()).parent / "wheels"
    return extract_from_wheel(downloaded_wheel(SMART_TURN_DISTRIBUTION, wheels), directory)


def main(argv: list[str] | None = None) -> None:
    """Command line: fetch the model into the cache (or ``--dir``) and print its path."""
    parser = argparse.ArgumentParser(description="Fetch the Smart Turn v3.2 end-of-turn model into the cache")
    parser.add_argument("--dir", type=Path, default=None, help="models folder (default: bargein's cache)")
    args = parser.parse_args(argv)
    print(fetch(args.dir))


if __name__ == "__main__":
    main()
