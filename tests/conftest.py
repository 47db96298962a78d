"""Test session set-up: Avalanche writes ~/.avalanche/config.json on import and W&B must never
reach the network, so HOME points at a temporary folder and W&B runs offline."""

import os
import tempfile

os.environ["HOME"] = tempfile.mkdtemp(prefix="pall-avalanche-home-")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
