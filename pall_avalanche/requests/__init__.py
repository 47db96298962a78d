"""Request sequences R_{1:r}: ordered learning, unlearning and permanence instructions.

A request is ``learn t`` (temporarily: t may be unlearned later), ``learn t`` permanently,
``unlearn t`` or ``make t permanent`` (the CLPU protocol of Liu, Liu and Stone, CoLLAs 2022:
a temporary task can be made permanent; a permanent task can never be unlearned). A sequence
is valid when every task is learned at most once, unlearned at most once and only after it
was learned (paper §3.2), made permanent only while it is learned and temporary, and never
unlearned once permanent. This module is the single source of truth for that model:
generation (the paper's procedure, with CLArena's ``unlearnable_age``), validation, the
active sets Ω_i, the string forms (``L0 P1 U0 M1``, CLPU's ``R0 T1 F1``, UnCLe's
``L6,L7,U1``) and the JSON form ``[{"kind": "learn", "task": 0}, ...]`` used in result records
and by ``--requests FILE`` (a permanent learning request adds ``"permanent": true``, so every
all-temporary sequence keeps the form it always had).
"""

from pall_avalanche.requests.generate import generate_requests
from pall_avalanche.requests.sequence import (
    REQUEST_KINDS,
    InvalidRequestSequence,
    Request,
    RequestKind,
    RequestSequence,
)

__all__ = [
    "REQUEST_KINDS",
    "InvalidRequestSequence",
    "Request",
    "RequestKind",
    "RequestSequence",
    "generate_requests",
]
