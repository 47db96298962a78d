"""Test session set-up: Avalanche writes ~/.avalanche/config.json on import and W&B must never
reach the network, so HOME points at a temporary folder and W&B runs offline; each
pytest-xdist worker (one per core, the default) computes with one torch thread."""

import json
import os
import tempfile

# before anything imports torch: a worker's torch threads would only compete with the other
# workers for the cores (torch reads this once, when it is first imported)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HOME"] = tempfile.mkdtemp(prefix="pall-avalanche-home-")
# Avalanche writes this file non-atomically on its first import; written here, processes that
# start together (--jobs workers, subprocess tests) only ever read it
_config = os.path.join(os.environ["HOME"], ".avalanche", "config.json")
os.makedirs(os.path.dirname(_config), exist_ok=True)
with open(_config, "w") as f:
    json.dump({"dataset_location": os.path.join(os.environ["HOME"], ".avalanche", "data")}, f)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
