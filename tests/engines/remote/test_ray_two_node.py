"""docs/scaling.md's two-machine Ray layout, followed on loopback: the cluster it gives requires a token.

Two "machines" on 127.0.0.1, each with its own throwaway HOME and Ray temp dir and its own free ports: B makes
a token (``ray get-auth-token --generate``) and starts a head with ``RAY_AUTH_MODE=token``; A gets a copy of
B's token and joins with ``--num-cpus 0``. Then bargein's own join (what ``bargein serve --ray-address`` runs)
accepts the cluster and sees both nodes alive, and a client without the token is refused, at the GCS and at the
head's Ray Client port (one with it runs code there). Each node runs as
``ray start --block`` so stopping it stops exactly its processes (never ``ray stop``: it stops every Ray
cluster of the machine's user).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, suppress
from pathlib import Path

import pytest

pytest.importorskip("ray")
RAY = str(Path(sys.executable).with_name("ray"))
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_JOIN_AND_COUNT = """
import json, sys
import ray
from bargein.config import Settings
from bargein.engines.remote.connect import _init_ray
_init_ray(Settings(ray_address=sys.argv[1]))
print(json.dumps([node["NodeManagerPort"] for node in ray.nodes() if node["Alive"]]))
ray.shutdown()
"""
"""bargein's join as ``bargein serve --ray-address`` makes it, then the alive nodes' manager ports as JSON."""
_STRANGER_RUNS_CODE = """
import sys
import ray
ray.init(sys.argv[1], logging_level="ERROR")
print("ran:", ray.get(ray.remote(lambda: 6 * 7).remote()))
"""
"""A client of the head's Ray Client server (``ray://``, port 10001 by default, on every interface) runs code:
machine A with the token may, a stranger without one (its own HOME, token auth off) may not."""


def _free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nobody listens on now (held together so they differ)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(closing(socket.socket())) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def _machine_env(home: Path) -> dict[str, str]:
    """The environment of one "machine": its own HOME, token auth on, no address or token inherited."""
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    return {**inherited, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}


class Node:
    """One ``ray start --block`` process, its log, and how to stop it and everything it started."""

    def __init__(self, home: Path, arguments: list[str]) -> None:
        self.home = home
        self.log = home / "ray-start.log"
        ports = _free_ports(4)
        command = [RAY, "start", "--block", "--node-ip-address", LOOPBACK, "--temp-dir", str(home / "ray"),
                   "--disable-usage-stats",
                   "--node-manager-port", str(ports[0]), "--object-manager-port", str(ports[1]),
                   "--dashboard-agent-listen-port", str(ports[2]), "--runtime-env-agent-port", str(ports[3]),
                   *arguments]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, env=_machine_env(home), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.manager_port = ports[0]

    def wait_started(self) -> None:
        """Until the node says it runs (its processes are up), failing with its log."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM (the node stops its processes), then kill whatever of it is left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        for pid in _processes_of(self.home, self.process.pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _processes_of(path: Path, session: int) -> list[int]:
    """Processes of one node: in the session its ``ray start`` leads, or naming its HOME (its temp dir) on
    their command line (Ray renames its workers' command lines, not their session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":  # already dead, waiting for its parent to reap it
                continue
            in_session = int(fields[3]) == session
            if in_session or str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.fixture
def homes() -> Iterator[tuple[Path, Path]]:
    """Machine B's and machine A's HOME (short paths under /tmp: Ray's socket paths have a length limit)."""
    made = [Path(tempfile.mkdtemp(prefix=f"bgr2{name}", dir="/tmp")) for name in "ba"]
    try:
        yield made[0], made[1]
    finally:
        for home in made:
            shutil.rmtree(home, ignore_errors=True)


def _generate_token(home_b: Path, home_a: Path) -> None:
    """B: ``ray get-auth-token --generate``; A: a copy of it, mode 600, as the docs say."""
    made = subprocess.run([RAY, "get-auth-token", "--generate"], env=_machine_env(home_b), capture_output=True,
                          timeout=START_TIMEOUT_S, check=False)
    token = home_b / ".ray" / "auth_token"
    assert made.returncode == 0 and token.is_file(), made.stderr.decode(errors="replace")[-2000:]
    (home_a / ".ray").mkdir(mode=0o700)
    shutil.copyfile(token, home_a / ".ray" / "auth_token")
    (home_a / ".ray" / "auth_token").chmod(0o600)


@pytest.mark.slow
def test_the_documented_two_node_cluster_requires_the_token(homes: tuple[Path, Path]) -> None:
    from bargein.engines.remote.ray_auth import cluster_is_open

    home_b, home_a = homes
    _generate_token(home_b, home_a)
    gcs_port, client_port = _free_ports(2)
    address = f"{LOOPBACK}:{gcs_port}"
    nodes: list[Node] = []
    try:
        nodes.append(Node(home_b, ["--head", "--port", str(gcs_port), "--num-cpus", "1", "--include-dashboard", "false",
                                   "--ray-client-server-port", str(client_port)]))
        nodes[0].wait_started()
        nodes.append(Node(home_a, ["--address", address, "--num-cpus", "0"]))
        nodes[1].wait_started()
        assert all(len(_processes_of(node.home, node.process.pid)) > 1 for node in nodes), "no node processes"

        assert not cluster_is_open(address), "the head answered a client without a token"
        joined = subprocess.run([sys.executable, "-c", _JOIN_AND_COUNT, address], env=_machine_env(home_a),
                                capture_output=True, timeout=START_TIMEOUT_S * 2, check=False)
        assert joined.returncode == 0, joined.stderr.decode(errors="replace")[-3000:]
        alive = json.loads(joined.stdout.decode().strip().splitlines()[-1])
        assert sorted(alive) == sorted(node.manager_port for node in nodes)

        client = f"ray://{LOOPBACK}:{client_port}"
        stranger = subprocess.run([sys.executable, "-c", _STRANGER_RUNS_CODE, client],
                                  env={**_machine_env(home_a / "stranger"), "RAY_AUTH_MODE": "disabled"},
                                  capture_output=True, timeout=START_TIMEOUT_S * 2, check=False)
        friend = subprocess.run([sys.executable, "-c", _STRANGER_RUNS_CODE, client], env=_machine_env(home_a),
                                capture_output=True, timeout=START_TIMEOUT_S * 2, check=False)
        assert b"ran: 42" in friend.stdout, friend.stderr.decode(errors="replace")[-3000:]  # the port serves
        assert b"ran: 42" not in stranger.stdout, "the head's Ray Client port ran a stranger's code without a token"
    finally:
        for node in reversed(nodes):
            node.stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (left := [pid for node in nodes for pid in _processes_of(node.home, node.process.pid)]) \
            and time.monotonic() < deadline:
        time.sleep(0.5)  # a killed process leaves /proc once it is reaped
    assert not left, f"Ray processes left behind: {left}"
