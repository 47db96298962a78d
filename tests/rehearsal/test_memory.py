"""The episodic memory's stacked buffers: one stack per buffer size and class count, kept
while the buffers stay as they are, gathering what a batched draw picks."""

from __future__ import annotations

import torch

from pall_avalanche.rehearsal import EpisodicMemory


def filled(sizes: dict[int, int], classes: int = 2) -> EpisodicMemory:
    memory = EpisodicMemory(buffer_size=100, n_tasks=None, store_logits=True)
    for task, size in sizes.items():
        y = torch.arange(size) % classes + 10 * task          # class ids 10t, 10t + 1, ...
        memory.buffers[task] = (torch.randn(size, 1, 8, 8), y, torch.randn(size, classes))
        memory.classes[task] = y.unique()
        memory.indices[task] = torch.arange(size)
    return memory


def test_tasks_of_one_buffer_size_share_a_stack_in_order():
    torch.manual_seed(0)
    memory = filled({0: 10, 1: 6, 2: 10, 3: 6, 4: 10})
    stacks = memory.stacks([4, 1, 0, 3, 2])
    assert [s.tasks for s in stacks] == [(4, 0, 2), (1, 3)]
    for stack in stacks:
        for g, task in enumerate(stack.tasks):
            x, y, z = memory.buffers[task]
            assert torch.equal(stack.x[g], x) and torch.equal(stack.y[g], y)
            assert torch.equal(stack.z[g], z)
            assert torch.equal(stack.classes[g], memory.classes[task])
            # labels: each sample's class as its position among the task's classes
            assert torch.equal(stack.labels[g], y - 10 * task)
    index = stacks[0].draw(4, repeats=2)
    assert index.shape == (3, 2, 4)
    x, y, z = stacks[0].gather(index)
    for g, task in enumerate(stacks[0].tasks):
        for j in range(2):
            assert torch.equal(x[g, j], memory.buffers[task][0][index[g, j]])
            assert torch.equal(y[g, j], memory.buffers[task][1][index[g, j]])
            assert torch.equal(z[g, j], memory.buffers[task][2][index[g, j]])


def test_stacks_are_kept_until_a_buffer_changes():
    memory = filled({0: 10, 1: 10})
    first = memory.stacks([0, 1])
    assert memory.stacks([0, 1]) is first
    x, y, z = memory.buffers[1]
    memory.buffers[1] = (x + 1, y, z)                 # a new buffer (a rebalance, a restore)
    again = memory.stacks([0, 1])
    assert again is not first and torch.equal(again[0].x[1], x + 1)


def test_columns_restrict_logits_to_each_tasks_classes():
    memory = filled({0: 4, 1: 4})
    for task, ids in ((0, [1, 3]), (1, [0, 2])):      # tasks with original class ids
        x, _, z = memory.buffers[task]
        memory.buffers[task] = (x, torch.tensor(ids * 2), z)
        memory.classes[task] = torch.tensor(ids)
    stack = memory.stacks([0, 1])[0]
    logits = torch.arange(2 * 3 * 4, dtype=torch.float).view(2, 3, 4)
    assert torch.equal(stack.columns(logits), torch.stack([logits[0][:, [1, 3]],
                                                           logits[1][:, [0, 2]]]))
