"""The rooms of :class:`~pall_avalanche.strategies.base.UnlearningTemplate`, one concern
each, composed as Avalanche composes ``SupervisedTemplate`` from mixins:

- :mod:`.lifecycle`: the request lifecycle (learning and unlearning requests, the one
  ``after_request`` event, divergence checks, the request in progress);
- :mod:`.permanence`: making a learned task permanent (the CLPU protocol);
- :mod:`.routing`: which task each sample goes through, the model's adaptation, the loaders;
- :mod:`.optimization`: optimizer renewal, fresh optimizers, training phases, the one
  unlearning loop;
- :mod:`.speed`: the speed options (bf16 autocast, channels-last, compile, the batched input
  path) as one object;
- :mod:`.state`: checkpoint state, inference size and what a method says of itself.

Methods subclass the assembled template only.
"""
