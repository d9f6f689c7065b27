"""One synthesis program run to its end or until the reply is cancelled, whichever comes first."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bargein.values import CancelToken


async def run_until_cancelled(argv: list[str], cancel: CancelToken, *, name: str,
                              output: Path | None = None) -> bytes | None:
    """The program's stdout (or the file ``output`` it writes), or None when ``cancel`` fired first (the
    process is then killed).

    No shell: ``argv`` goes to the program as it is. A failed run (a non-zero code or no output)
    raises :class:`RuntimeError` with the start of its stderr.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    running = asyncio.ensure_future(proc.communicate())
    stop = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait((running, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not running.done():
            if proc.returncode is None:
                proc.kill()
            await asyncio.gather(running, return_exceptions=True)
    if cancel.cancelled:
        return None
    stdout, stderr = running.result()
    if output is not None and proc.returncode == 0:
        stdout = await asyncio.to_thread(_contents, output)
    if proc.returncode != 0 or not stdout:
        raise RuntimeError(f"{name} failed with code {proc.returncode}: "
                           f"{stderr.decode(errors='replace').strip()[:200]}")
    return stdout


def _contents(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""
