"""Test session set-up: Avalanche writes ~/.avalanche/config.json on import and W&B must never
reach the network, so HOME points at a temporary folder and W&B runs offline."""

import json
import os
import tempfile

os.environ["HOME"] = tempfile.mkdtemp(prefix="pall-avalanche-home-")
# Avalanche writes this file non-atomically on its first import; written here, processes that
# start together (--jobs workers, subprocess tests) only ever read it
_config = os.path.join(os.environ["HOME"], ".avalanche", "config.json")
os.makedirs(os.path.dirname(_config), exist_ok=True)
with open(_config, "w") as f:
    json.dump({"dataset_location": os.path.join(os.environ["HOME"], ".avalanche", "data")}, f)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
