"""Token authentication for the Ray cluster of the remote stages: bargein's own connection, and the cluster's.

Ray runs any code a cluster member or driver sends it, so a cluster without authentication is open to
everyone on its network. Ray 2.60 turns token authentication on only for a head started with
``RAY_AUTH_MODE=token`` or with a token already in place. So ``bargein serve --ray-address`` and
``bargein ray-deploy``, before they join a cluster:

1. probe it as a stranger would (:func:`cluster_is_open`): a fresh process without a token and with
   authentication off asks the head's GCS for a key; a head that answers is open, and bargein refuses it
   (:class:`RayClusterOpen`) unless ``--ray-insecure`` (``BARGEIN_RAY_INSECURE``) says the operator knows;
2. connect with token authentication (:func:`use_token_auth`: ``RAY_AUTH_MODE=token`` in bargein's own
   process, the token where Ray looks for it: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
   ``~/.ray/auth_token``), failing with the command that makes one when there is none.

A Ray Client address (``ray://``) cannot be probed this way (its port is not the GCS's): it needs
``--ray-insecure``, after the operator has checked the cluster; join with ``HOST:6379`` instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import tempfile
from typing import Any

log = logging.getLogger(__name__)
AUTH_MODE_ENV = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 60.0
_REFUSED = 3
_PROBE = """
import sys
from ray._private.services import canonicalize_bootstrap_address_or_die
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    client = GcsClient(address=canonicalize_bootstrap_address_or_die(sys.argv[1]))
    client.internal_kv_get(b"bargein-auth-probe", None, timeout=10)
except AuthenticationError:
    sys.exit(3)
"""
"""Exits 0 when the GCS answered a client without a token, 3 when it refused it, else with an error."""
FIX = ("start the head with RAY_AUTH_MODE=token (after `ray get-auth-token --generate`; copy ~/.ray/auth_token "
       "to every machine that joins)")


class RayAuthError(RuntimeError):
    """The Ray cluster's authentication is not what bargein needs; the message says how to fix it."""


class RayClusterOpen(RayAuthError):
    """The Ray cluster answers clients without a token (anyone on its network can run code on it)."""


def check_cluster(address: str, *, insecure: bool, joining: bool = True) -> None:
    """Refuse an open cluster at ``address`` (unless ``insecure``), then set up token auth for joining it
    (``joining``; False: this process is connected already)."""
    if insecure:
        log.warning("--ray-insecure: not checking that the Ray cluster at %s requires a token; an open cluster "
                    "runs code from anyone on its network", address)
        return
    if address.startswith("ray://"):
        raise RayAuthError(f"--ray-address {address!r}: bargein cannot check that a Ray Client address requires a "
                           "token; join the cluster's GCS (HOST:6379) instead, or pass --ray-insecure "
                           "(BARGEIN_RAY_INSECURE) once you have checked it yourself")
    if cluster_is_open(address):
        raise RayClusterOpen(f"the Ray cluster at {address!r} answers clients without a token: anyone who can reach "
                             f"it can run code on it. Fix: {FIX}; or pass --ray-insecure (BARGEIN_RAY_INSECURE) "
                             "for a cluster on a network nobody else can reach")
    if joining:
        use_token_auth()


def cluster_is_open(address: str) -> bool:
    """Whether the GCS at ``address`` (``auto``: this machine's cluster) answers a client that has no token."""
    with tempfile.TemporaryDirectory(prefix="bargein-ray-probe-") as home:
        environment = {"PATH": os.environ.get("PATH", ""), "HOME": home, AUTH_MODE_ENV: "disabled",
                       "PYTHONPATH": os.pathsep.join(sys.path)}
        if "RAY_ADDRESS" in os.environ:  # what ``auto`` means to Ray
            environment["RAY_ADDRESS"] = os.environ["RAY_ADDRESS"]
        try:
            probe = subprocess.run([sys.executable, "-c", _PROBE, address], env=environment, capture_output=True,
                                   timeout=PROBE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as error:
            raise RayAuthError(f"--ray-address {address!r}: no answer to the authentication check in "
                               f"{PROBE_TIMEOUT_S:.0f} s") from error
    if probe.returncode in (0, _REFUSED):
        return probe.returncode == 0
    detail = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    raise RayAuthError(f"--ray-address {address!r}: could not check the cluster's authentication: {detail[0]}"[:600])


def use_token_auth() -> None:
    """Have this process's Ray connections authenticate with the token (raises when there is none)."""
    os.environ[AUTH_MODE_ENV] = "token"
    raylet: Any = importlib.import_module("ray._raylet")  # compiled, without type stubs
    raylet.Config.initialize("")  # Ray reads its configuration once: have it read the mode again
    loader = raylet.AuthenticationTokenLoader.instance()
    loader.reset_cache()
    if not loader.has_token(ignore_auth_mode=True):
        raise RayAuthError("the Ray cluster requires a token and this machine has none: copy the head's "
                           "~/.ray/auth_token here (or set RAY_AUTH_TOKEN_PATH / RAY_AUTH_TOKEN)")
