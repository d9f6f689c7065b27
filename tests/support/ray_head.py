"""A one-node Ray cluster for the authentication tests: ``python ray_head.py token|disabled HOME``.

Starts a local head with ``RAY_AUTH_MODE`` as asked (a token, when asked for, is made in ``HOME``, never the
user's own ``~/.ray``), prints its GCS address, and shuts it down when its stdin closes.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Start the head, say where it is, wait for stdin to close, stop it."""
    mode, home = sys.argv[1], sys.argv[2]
    os.environ.update({"RAY_AUTH_MODE": mode, "HOME": home})
    import ray

    context = ray.init(num_cpus=1, include_dashboard=False, _temp_dir=os.path.join(home, "ray"),
                       log_to_driver=False, configure_logging=False)
    print(context.address_info["gcs_address"], flush=True)
    sys.stdin.read()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
