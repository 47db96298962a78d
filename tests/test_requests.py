"""The request model: the paper's generator, validation, active sets and the JSON form."""

import json

import pytest

from pall_avalanche.requests import (
    InvalidRequestSequence,
    Request,
    RequestSequence,
    generate_requests,
)


def seq(text: str, n_tasks: int = 5) -> RequestSequence:
    """``"L0 L1 U0"`` → a RequestSequence."""
    return RequestSequence.parse(text, n_tasks)


@pytest.mark.parametrize("seed", range(30))
def test_generated_sequences_follow_the_protocol(seed):
    requests = generate_requests(5, 3, seed)
    assert len(requests) == 8
    assert requests.learned_tasks == [0, 1, 2, 3, 4]  # learning in task order
    assert len(set(requests.unlearned_tasks)) == 3
    for r in requests:
        if not r.is_learn:  # every unlearning request comes after its learning request
            position = list(requests).index(r)
            assert list(requests).index(Request("learn", r.task)) < position


def test_generator_is_deterministic_and_seed_dependent():
    assert generate_requests(10, 3, 7) == generate_requests(10, 3, 7)
    assert len({tuple(generate_requests(10, 3, s)) for s in range(20)}) > 10


def test_generator_places_unlearning_uniformly_after_learning():
    # T=2, N_u=1 drawing task 0: after L0 the positions 1 and 2 are equally likely
    # (L0 U0 L1 or L0 L1 U0); drawing task 1 leaves one position (L0 L1 U1).
    counts: dict[str, int] = {}
    for seed in range(2000):
        key = str(generate_requests(2, 1, seed))
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) == {
        "L0 U0 L1",
        "L0 L1 U0",
        "L0 L1 U1",
    }
    assert counts["L0 L1 U1"] == pytest.approx(1000, abs=120)
    assert counts["L0 U0 L1"] == pytest.approx(500, abs=90)


def test_generator_rejects_more_unlearning_than_tasks():
    with pytest.raises(InvalidRequestSequence, match=r"n_unlearn=6 .* 0\.\.5"):
        generate_requests(5, 6, 0)
    assert len(generate_requests(5, 5, 0).unlearned_tasks) == 5
    assert generate_requests(5, 0, 0).unlearned_tasks == []


def test_paper_example_and_active_sets():
    # Paper §4.1: L1, L2, L3, U2, L4, U3, L5, U1 (1-based) = tasks 0..4 here.
    requests = seq("L0 L1 L2 U1 L3 U2 L4 U0")
    assert [sorted(a) for a in requests.active_sets()] == [
        [0], [0, 1], [0, 1, 2], [0, 2], [0, 2, 3], [0, 3], [0, 3, 4], [3, 4]]
    assert requests.unlearned_tasks == [1, 2, 0]


@pytest.mark.parametrize("text, message", [
    ("L0 U1", r"request 2 \(U1\): task 1 is unlearned before it was learned"),
    ("L0 L0", r"request 2 \(L0\): task 0 is learned twice"),
    ("L0 U0 U0", r"request 3 \(U0\): task 0 is unlearned twice"),
    ("L0 L7", r"request 2 \(L7\): unknown task id 7; valid task ids are 0\.\.4"),
])
def test_invalid_sequences_name_the_problem(text, message):
    with pytest.raises(InvalidRequestSequence, match=message):
        seq(text)


def test_a_negative_task_id_is_refused_by_the_sequence_and_by_the_text():
    with pytest.raises(InvalidRequestSequence, match=r"request 2 \(L-1\): unknown task id -1"):
        RequestSequence([Request("learn", 0), Request("learn", -1)], 5)
    with pytest.raises(InvalidRequestSequence, match=r"request 'L-1' is not L<task>"):
        seq("L0 L-1")


def test_json_round_trip_and_bad_files(tmp_path):
    requests = seq("L0 L1 U0 L2")
    path = tmp_path / "r.json"
    requests.save(path)
    assert json.loads(path.read_text())[2] == {"kind": "unlearn", "task": 0}
    assert RequestSequence.load(path, 5) == requests

    path.write_text('[{"kind": "forget", "task": 0}]')
    with pytest.raises(InvalidRequestSequence, match="request 1: unknown request kind 'forget'"):
        RequestSequence.load(path, 5)
    path.write_text('[{"kind": "learn"}]')
    with pytest.raises(InvalidRequestSequence, match="expected an object with the keys .kind."):
        RequestSequence.load(path, 5)
    path.write_text('{"kind": "learn", "task": 0}')
    with pytest.raises(InvalidRequestSequence, match="expected a JSON list"):
        RequestSequence.load(path, 5)
    path.write_text("[")
    with pytest.raises(InvalidRequestSequence, match="not valid JSON"):
        RequestSequence.load(path, 5)


def test_requests_are_immutable_and_oracle_removal():
    requests = seq("L0 L1 U0 L2 U2")
    with pytest.raises(AttributeError):
        requests[0].task = 3
    assert requests.without_tasks([0]) == seq("L1 L2 U2")
    assert requests.without_tasks([0, 2]) == seq("L1")
