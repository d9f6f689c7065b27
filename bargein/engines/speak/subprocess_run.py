"""One synthesis program run to its end or until the reply is cancelled, whichever comes first."""

from __future__ import annotations

import asyncio

from bargein.engines.base import CancelToken


async def run_until_cancelled(argv: list[str], cancel: CancelToken, *, name: str) -> bytes | None:
    """The program's stdout, or None when ``cancel`` fired first (the process is then killed).

    No shell: ``argv`` goes to the program as it is. A failed run (a non-zero code or no output)
    raises :class:`RuntimeError` with the start of its stderr.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    output = asyncio.ensure_future(proc.communicate())
    stop = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait((output, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not output.done():
            if proc.returncode is None:
                proc.kill()
            await asyncio.gather(output, return_exceptions=True)
    if cancel.cancelled:
        return None
    stdout, stderr = output.result()
    if proc.returncode != 0 or not stdout:
        raise RuntimeError(f"{name} failed with code {proc.returncode}: "
                           f"{stderr.decode(errors='replace').strip()[:200]}")
    return stdout
