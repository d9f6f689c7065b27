"""A worker that sends a pickle whose loading would run code (it writes the file named on its command line),
as a compromised engine process could: the server must refuse it without loading it."""

from __future__ import annotations

import os
import pickle
import sys
import time
from multiprocessing.connection import Connection


class Payload:
    """Unpickling this calls ``open(path, "w")``: a stand-in for any code a pickle can run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def main() -> int:
    """Send the pickle as the first message (where ``ready`` belongs), then wait to be stopped."""
    conn = Connection(int(os.environ["BARGEIN_WORKER_FD"]))
    conn.send_bytes(pickle.dumps(("ready", Payload(sys.argv[1]))))
    time.sleep(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
