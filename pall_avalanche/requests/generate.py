"""The paper's random request sequence, drawn as its reference implementation draws it, with
CLArena's ``unlearnable_age`` for the CLPU protocol."""

from __future__ import annotations

import random

from pall_avalanche.requests.sequence import (
    InvalidRequestSequence,
    Request,
    RequestKind,
    RequestSequence,
    insert_make_permanent,
    learning_position,
    permanent_position,
)


def generate_requests(n_tasks: int, n_unlearn: int, seed: int,
                      unlearnable_age: int | None = None) -> RequestSequence:
    """The paper's random request sequence, drawn as its reference draws it, so seed k gives
    the reference's sequence of seed k (docs/fidelity.md, "Benchmarks and requests").

    Learning requests come in task order ``0..n_tasks-1``. ``n_unlearn`` distinct tasks are
    drawn without replacement (``random.choice`` of the tasks not drawn yet, one at a time);
    for each, in drawing order, its unlearning request is inserted at a uniformly random
    position after that task's learning request in the list so far (``random.choice`` of the
    positions) — all from Python's generator seeded with ``seed``.

    With ``unlearnable_age`` N (CLArena's, the CLPU protocol), task t can be unlearned while
    fewer than N tasks were learned after it, and becomes permanent when task t + N starts, as
    CLArena's experiment loop makes it: t's unlearning request (if drawn) is placed after its
    learning request and before the learning request of task t + N, and every other task's
    ``make_permanent`` request right before the learning request of task t + N (after the
    unlearning requests there; none for t + N ≥ T). With N = 0 every task is learned
    permanently (so ``n_unlearn`` must be 0). The draws are the same as without it, only from
    fewer positions, so ``None`` (every task temporary for ever, the paper's protocol) gives
    the sequence it always gave.

    :param n_tasks: T, the number of tasks.
    :param n_unlearn: N_u, the number of unlearning requests (0..T).
    :param seed: the seed of the sequence.
    :param unlearnable_age: N, the number of later learning requests at which a task becomes
        permanent (it is unlearnable at ages 0 .. N − 1), or ``None`` (never).
    """
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
        raise InvalidRequestSequence(f"n_tasks={n_tasks!r} must be a positive integer")
    if isinstance(n_unlearn, bool) or not isinstance(n_unlearn, int) or not (
        0 <= n_unlearn <= n_tasks
    ):
        raise InvalidRequestSequence(
            f"n_unlearn={n_unlearn!r} is invalid; it must be an integer in 0..{n_tasks} "
            f"(N_u cannot exceed the number of tasks T={n_tasks})"
        )
    if unlearnable_age is not None and (
            isinstance(unlearnable_age, bool) or not isinstance(unlearnable_age, int)
            or unlearnable_age < 0):
        raise InvalidRequestSequence(
            f"unlearnable_age={unlearnable_age!r} is invalid; it must be an integer >= 0 "
            "(or None: every task stays unlearnable)")
    if unlearnable_age == 0 and n_unlearn:
        raise InvalidRequestSequence(
            f"n_unlearn={n_unlearn} with unlearnable_age=0: every task is learned "
            "permanently, so none can be unlearned; use n_unlearn=0 or unlearnable_age >= 1")
    rng = random.Random(seed)
    sequence = [Request(RequestKind.LEARN, t, permanent=unlearnable_age == 0)
                for t in range(n_tasks)]
    undrawn = list(range(n_tasks))
    drawn = []
    for _ in range(n_unlearn):
        task = rng.choice(undrawn)
        undrawn.remove(task)
        drawn.append(task)

    for task in drawn:
        end = permanent_position(sequence, task, unlearnable_age)
        position = rng.choice(range(learning_position(sequence, task) + 1,
                                    len(sequence) + 1 if end is None else end + 1))
        sequence.insert(position, Request(RequestKind.UNLEARN, task))
    insert_make_permanent(sequence, sorted(set(range(n_tasks)) - set(drawn)), unlearnable_age)
    return RequestSequence(sequence, n_tasks)
