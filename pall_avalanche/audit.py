"""Exactness audit: compare every unlearned model with models that never saw the task.

For a request sequence R that unlearns the tasks U, the oracle sequence R′ is R without any
request of a task in U (:func:`oracle_sequence`). Per method and seed the audit trains three
models with the same class split and the same initial weights (the runner seeds both from
the seed): the unlearned model on R, the oracle on R′, and a reference oracle on R′ with
different training randomness (``train_seed``), which gives the oracle-vs-oracle baseline.
An :class:`AuditProbe` rides along each run: it records the final model's logits (every
head) on each unlearned task's training inputs and held-out test inputs, and, for
subnetwork methods, a run-time :class:`ProvenanceTracker` check.

Measurements (:func:`audit_rows`), each with a 95 % interval over seeds:

- **Distinguisher AUC** (Eq. 1 directly): a logistic regression, 5-fold cross-validated,
  separates "learned then unlearned t" (R) from "never learned t" (R′) using summary
  features of the final model's outputs on t's training inputs (:func:`model_features`):
  all heads, and t's head only. Interval: percentile bootstrap over seeds (2,000 resamples
  of the out-of-fold scores). 0.5 = indistinguishable.
- **JS gap**: mean Jensen–Shannon divergence (bits, per head's softmax, averaged over heads
  and inputs) of the unlearned model to the reference oracle minus that of the oracle to the
  reference oracle. Interval: Student t over the per-seed differences. 0 = as close as
  another oracle.
- **MIA gap**: membership inference on t's training inputs against held-out inputs of the
  same classes — a loss attack (score −CE on t's head) and a feature attack (logistic
  regression on per-sample confidences, 5-fold) — AUC on the unlearned model minus AUC on the
  oracle. Interval: Student t over seeds.
- **Provenance** (subnetwork methods): at every unlearning request, every entry whose current
  value was trained with D^t or B^t must have been re-drawn (direct); the strict check also
  requires the entries trained while t's weights were in the forward pass, and the stored
  buffer logits, to be free of t.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pall_avalanche.catalog import AUDIT_FOLDS as N_FOLDS
from pall_avalanche.catalog import AUDIT_REFERENCE_SEED_OFFSET as REFERENCE_SEED_OFFSET
from pall_avalanche.catalog import AUDIT_REQUESTS
from pall_avalanche.core import RequestResult
from pall_avalanche.masks import SubnetworkNet
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs import run_experiments
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = [
    "AUDIT_REQUESTS",
    "AuditProbe",
    "N_FOLDS",
    "ProvenanceTracker",
    "REFERENCE_SEED_OFFSET",
    "audit_rows",
    "bootstrap_auc_interval",
    "distinguisher_scores",
    "head_probabilities",
    "interval_cell",
    "js_divergence",
    "membership_aucs",
    "model_features",
    "oracle_sequence",
    "roc_auc",
    "run_audit",
    "separated",
    "t_interval",
]

# The audited sequence AUDIT_REQUESTS: task 1 is unlearned after tasks 2 and 3 were learned on
# top of it (the channels of docs/fidelity.md, "Where exact unlearning is weaker", are open),
# and task 4 is learned after the unlearning; the reference oracle of seed s trains with
# training seed s + REFERENCE_SEED_OFFSET (both in pall_avalanche.catalog: the command line
# reads them without torch).
N_BOOTSTRAP = 2000


# ----------------------------------------------------------------------------- requests
def oracle_sequence(requests: RequestSequence) -> tuple[RequestSequence, list[int]]:
    """(R′, U): the sequence without every request of an unlearned task, and those tasks.

    :param requests: the audited sequence R; it must unlearn at least one task.
    """
    unlearned = [r.task for r in requests if not r.is_learn]
    if not unlearned:
        raise ValueError(f"the sequence {[str(r) for r in requests]} unlearns no task; the "
                         "audit needs at least one unlearning request")
    return requests.without_tasks(unlearned), unlearned


# ------------------------------------------------------------------------- statistics
def js_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen–Shannon divergence in bits between the distributions on the last axis
    (0 ≤ JS ≤ 1); one value per leading index.

    :param p: probabilities, shape (..., k), rows summing to 1.
    :param q: probabilities of the same shape.
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != q.shape:
        raise ValueError(f"p and q have different shapes {p.shape} and {q.shape}")
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(a > 0, a * np.log2(a / m), 0.0)
        return terms.sum(axis=-1)

    return 0.5 * kl(p) + 0.5 * kl(q)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve: the probability that a random positive scores above a random
    negative (ties count one half), by the Mann–Whitney rank sum.

    :param scores: higher = more likely positive.
    :param labels: 1 (positive) or 0 (negative); both must occur.
    """
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels)
    n_pos, n_neg = int((labels == 1).sum()), int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0 or n_pos + n_neg != len(labels):
        raise ValueError(f"labels must be 0/1 with both classes present, got {labels.tolist()}")
    ranks = stats.rankdata(scores)
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t confidence interval of the mean.

    :param values: one value per seed (at least two).
    :param level: confidence level.
    """
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got {len(values)}")
    mean = float(values.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)
                 * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def bootstrap_auc_interval(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray,
                           level: float = 0.95, n_boot: int = N_BOOTSTRAP, seed: int = 0
                           ) -> tuple[float, float, float]:
    """(AUC, low, high): the AUC and its percentile bootstrap interval, resampling whole
    groups (seeds) with replacement.

    :param scores: out-of-fold scores, one per sample.
    :param labels: 0/1 per sample.
    :param groups: the seed of each sample.
    """
    auc = roc_auc(scores, labels)
    rng = np.random.default_rng(seed)
    ids = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in ids]
    boots = []
    for _ in range(n_boot):
        index = np.concatenate([members[i] for i in rng.integers(0, len(ids), len(ids))])
        if len(np.unique(labels[index])) == 2:
            boots.append(roc_auc(scores[index], labels[index]))
    low, high = np.percentile(boots, [50 * (1 - level), 50 * (1 + level)])
    return auc, float(low), float(high)


# ------------------------------------------------------------------------- features
def head_probabilities(logits: np.ndarray, classes_per_task: int) -> np.ndarray:
    """(n, T·cpt) logits of every head → (n, T, cpt) per-head softmax probabilities."""
    logits = np.asarray(logits, dtype=float)
    blocks = logits.reshape(len(logits), -1, classes_per_task)
    blocks = blocks - blocks.max(axis=-1, keepdims=True)
    exp = np.exp(blocks)
    return exp / exp.sum(axis=-1, keepdims=True)


def _entropy(probs: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(probs > 0, probs * np.log2(probs), 0.0).sum(axis=-1)


def _per_sample(logits: np.ndarray, y: np.ndarray, task: int, cpt: int) -> np.ndarray:
    """Per-sample features: each head's max probability and entropy, then t's head's CE loss
    and true-class probability."""
    probs = head_probabilities(logits, cpt)
    true = probs[np.arange(len(y)), task, y]
    return np.column_stack([probs.max(-1), _entropy(probs), -np.log(np.clip(true, 1e-12, 1)),
                            true])


def model_features(output: Mapping[str, Any], task: int, classes_per_task: int,
                   head_only: bool = False) -> np.ndarray:
    """Summary features of one final model's behaviour on task ``task``'s training inputs:
    per head, the mean max probability, mean entropy and mean logit norm; for t's head also
    the accuracy and the mean CE loss. ``head_only`` keeps t's head's five features.

    :param output: a probe output of the task (``{"train": {"logits", "y"}, ...}``).
    """
    logits = np.asarray(output["train"]["logits"], dtype=float)
    y = np.asarray(output["train"]["y"])
    probs = head_probabilities(logits, classes_per_task)
    blocks = logits.reshape(len(logits), -1, classes_per_task)
    per_head = np.stack([probs.max(-1).mean(0), _entropy(probs).mean(0),
                         np.linalg.norm(blocks, axis=-1).mean(0)], axis=1)  # (T, 3)
    true = probs[np.arange(len(y)), task, y]
    own = [float((probs[:, task].argmax(-1) == y).mean()),
           float(-np.log(np.clip(true, 1e-12, 1)).mean())]
    if head_only:
        return np.concatenate([per_head[task], own])
    return np.concatenate([per_head.reshape(-1), own])


def _classifier():
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))


def distinguisher_scores(features: np.ndarray, labels: np.ndarray,
                         groups: np.ndarray | None = None, n_folds: int = N_FOLDS
                         ) -> np.ndarray:
    """Out-of-fold probabilities of label 1 from a standardised logistic regression,
    stratified ``n_folds``-fold cross-validation (shuffled, fixed seed). With ``groups``
    (the seeds) the samples of one group share a fold, so a model's twin of the same seed
    never trains the classifier that scores it.

    :param features: (n, k) features.
    :param labels: 0/1 per sample.
    :param groups: a group id per sample, or None.
    """
    labels = np.asarray(labels)
    n_groups = len(np.unique(groups)) if groups is not None else len(labels)
    splits = min(n_folds, int(np.bincount(labels).min()), n_groups)
    if groups is None:
        folds = StratifiedKFold(n_splits=splits, shuffle=True, random_state=0)
    else:
        folds = StratifiedGroupKFold(n_splits=splits, shuffle=True, random_state=0)
    return cross_val_predict(_classifier(), features, labels, cv=folds, groups=groups,
                             method="predict_proba")[:, 1]


def membership_aucs(output: Mapping[str, Any], task: int, classes_per_task: int
                    ) -> tuple[float, float]:
    """(loss attack AUC, feature attack AUC) of membership inference on one model: members
    are t's training inputs, non-members its held-out inputs of the same classes."""
    train, test = output["train"], output["test"]
    feats = np.concatenate([
        _per_sample(np.asarray(train["logits"]), np.asarray(train["y"]), task, classes_per_task),
        _per_sample(np.asarray(test["logits"]), np.asarray(test["y"]), task, classes_per_task)])
    labels = np.r_[np.ones(len(train["y"]), int), np.zeros(len(test["y"]), int)]
    loss_auc = roc_auc(-feats[:, -2], labels)
    return loss_auc, roc_auc(distinguisher_scores(feats, labels), labels)


def _mean_js(a: Mapping[str, Any], b: Mapping[str, Any], classes_per_task: int) -> float:
    logits_a = np.concatenate([np.asarray(a[s]["logits"]) for s in ("train", "test")])
    logits_b = np.concatenate([np.asarray(b[s]["logits"]) for s in ("train", "test")])
    return float(js_divergence(head_probabilities(logits_a, classes_per_task),
                               head_probabilities(logits_b, classes_per_task)).mean())


# ------------------------------------------------------------------------ provenance
def _flat(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([w.detach().reshape(-1) for w in weights]).clone()


class ProvenanceTracker(UnlearningPlugin):
    """Run-time provenance of every maskable entry of a subnetwork method, tracked from the
    weights' values alone (independently of the method's own bookkeeping).

    - ``direct[t]``: entries whose current value was updated with D^t (changed during t's
      learning request) or with B^t (changed during a retraining that used t's buffer),
      cleared when the entry is re-drawn.
    - ``forward[t]``: entries updated while an entry of ``direct[t] ∪ forward[t]`` was in the
      forward pass (a later task trained on top of t's weights), or retrained towards stored
      logits that depend on t.

    At every unlearning request of t it checks (``results``): *direct* — every entry of
    ``direct[t]`` changed value during the request (was re-drawn) and, where the method
    promises a ``redraw_set(t)``, lies in that set; *strict* — the same for ``forward[t]``, and no
    remaining buffer stores logits computed with t's weights. Entries changed during an
    unlearning request count as re-drawn; those in a remaining task's mask as then retrained
    with that task's buffer (B^u's loss reaches only m_u), the others as trained with the
    remaining tasks' weights in the forward pass. "In the forward pass" is read from the
    tasks' final masks, not the evolving masks during training: the strict check is an
    under-approximation. Strategies whose model is not a
    :class:`~pall_avalanche.masks.SubnetworkNet` are not tracked (``results`` stays None).
    The weights are read when a request starts (and after each epoch); each request is booked
    when it is over, in the template's ``after_request`` event.
    """

    def __init__(self) -> None:
        super().__init__()
        self.results: list[dict] | None = None
        self.direct: dict[int, torch.Tensor] = {}
        self.forward: dict[int, torch.Tensor] = {}
        self.logit_deps: dict[int, set[int]] = {}
        self._start = self._end = self._expected = None

    @staticmethod
    def _weights(strategy: UnlearningTemplate) -> list[torch.Tensor] | None:
        net = strategy.model
        return [w for _, w in net.named_weights()] if isinstance(net, SubnetworkNet) else None

    @staticmethod
    def _mask(strategy: UnlearningTemplate, task: int) -> torch.Tensor:
        bools = strategy.model.masks[task].bools()
        return torch.cat([b.reshape(-1) for b in bools.values()])

    def _influencers(self, mask: torch.Tensor, exclude: int | None = None) -> set[int]:
        return {u for u in self.direct if u != exclude
                and bool(((self.direct[u] | self.forward[u]) & mask).any())}

    def _clear(self, entries: torch.Tensor) -> None:
        for u in self.direct:
            self.direct[u] &= ~entries
            self.forward[u] &= ~entries

    def before_training_exp(self, strategy, **kwargs) -> None:
        weights = self._weights(strategy)
        if weights is None:
            return
        if self.results is None:
            self.results = []
        self._start = _flat(weights)

    def after_training_epoch(self, strategy, **kwargs) -> None:
        if self._start is not None:
            self._end = _flat(self._weights(strategy))

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        """Book the request once it is over (the template's ``after_request``)."""
        if result.kind == "learn":
            self._learned(strategy, result.task)
        else:
            self._unlearned(strategy, result.task)

    def _learned(self, strategy: UnlearningTemplate, task: int) -> None:
        if self._start is None:
            return
        changed = self._end != self._start
        mask = self._mask(strategy, task)
        for u in self._influencers(mask, exclude=task):
            self.forward[u] |= changed
        self.direct[task] = changed.clone()
        self.forward[task] = torch.zeros_like(changed)
        self._clear(_flat(self._weights(strategy)) != self._end)  # re-drawn after learning
        if strategy.stores_logits():
            self.logit_deps[task] = self._influencers(mask, exclude=task)
        self._start = self._end = None

    def before_unlearning(self, strategy, task: int, **kwargs) -> None:
        if self.results is None:
            return
        self._start = _flat(self._weights(strategy))
        promised = strategy.redraw_set(task)
        self._expected = None if promised is None else torch.cat(
            [b.reshape(-1) for b in promised.bools().values()])

    def _unlearned(self, strategy: UnlearningTemplate, task: int) -> None:
        if self.results is None or self._start is None:
            return
        changed = _flat(self._weights(strategy)) != self._start
        covered = changed if self._expected is None else changed & self._expected
        remaining = list(strategy.active_tasks)
        direct, forward = self.direct.pop(task), self.forward.pop(task)
        self.logit_deps.pop(task, None)
        logits_free = not any(task in self.logit_deps.get(u, ()) for u in remaining)
        missed_direct = int((direct & ~covered).sum())
        missed_forward = int((forward & ~covered).sum())
        self.results.append({
            "task": task, "direct_entries": int(direct.sum()), "direct_missed": missed_direct,
            "forward_entries": int(forward.sum()), "forward_missed": missed_forward,
            "logits_free": logits_free, "direct_pass": missed_direct == 0,
            "strict_pass": missed_direct == 0 and missed_forward == 0 and logits_free,
        })
        self._clear(changed)
        if remaining:
            masks = {u: self._mask(strategy, u) for u in remaining}
            retrained = changed & torch.stack(list(masks.values())).any(0)
            sources = set().union(*(self._influencers(m) for m in masks.values()))
            sources |= set().union(*(self.logit_deps.get(u, set()) for u in remaining))
            for u in remaining:
                # B^u's loss term moves only entries of u's own mask (docs/fidelity.md,
                # "PALL"); the rest of the retrained entries merely saw u's weights in the
                # forward pass.
                self.direct[u] |= retrained & masks[u]
                self.forward[u] |= retrained & ~masks[u]
            for u in sources & set(self.direct):
                self.forward[u] |= retrained
        self._start = self._expected = None


# ------------------------------------------------------------------------------ probe
class AuditProbe:
    """Rides along one run (``run_record(..., probe=AuditProbe(tasks))``): its plugin tracks
    provenance; :meth:`finish` returns the JSON-ready probe of the final model.

    :param tasks: the unlearned tasks whose inputs are probed.
    """

    def __init__(self, tasks: Sequence[int]) -> None:
        self.tasks = list(tasks)
        self.tracker = ProvenanceTracker()
        self.plugins = [self.tracker]

    @torch.no_grad()
    def _logits(self, strategy: UnlearningTemplate, dataset, n_tasks: int, batch: int
                ) -> dict[str, list]:
        data = dataset.eval()
        x = torch.stack([data[i][0] for i in range(len(data))]).to(strategy.device)
        y = [int(data[i][1]) for i in range(len(data))]
        model = strategy.model
        model.eval()
        logits = torch.cat([torch.cat([model(x[i:i + batch], h) for i in range(0, len(x), batch)])
                            for h in range(n_tasks)], dim=1)
        return {"logits": np.round(logits.cpu().numpy(), 5).tolist(), "y": y}

    def finish(self, strategy: UnlearningTemplate, benchmark) -> dict[str, Any]:
        """The final model's logits (every head) on each probed task's training and test
        inputs, and the provenance results."""
        n_tasks = benchmark.split.n_tasks
        batch = strategy.eval_mb_size or strategy.train_mb_size
        outputs = {str(t): {"train": self._logits(strategy, benchmark.train_stream[t].dataset,
                                                  n_tasks, batch),
                            "test": self._logits(strategy, benchmark.test_stream[t].dataset,
                                                 n_tasks, batch)}
                   for t in self.tasks}
        return {"outputs": outputs, "provenance": self.tracker.results}


# ------------------------------------------------------------------------ the audit
def run_audit(methods: Sequence[str], seeds: Sequence[int], config: dict, out_dir: str | Path,
              *, requests: RequestSequence, **options: Any) -> dict[str, list[dict]]:
    """Run (or reuse) the unlearned, oracle and reference-oracle records of every method and
    seed under ``out_dir/{unlearned,oracle,reference}``; return them by role.

    :param methods: registered method names.
    :param seeds: at least two seeds.
    :param config: a full configuration.
    :param requests: the audited sequence R (it must unlearn a task).
    :param options: further keyword arguments of
        :func:`~pall_avalanche.runs.run_experiments` (``device``, ``jobs``, ``wandb``,
        ``show_progress``); checkpoints are off (the probe's state is not checkpointed).
    """
    if len(seeds) < 2:
        raise ValueError(f"the audit needs at least 2 seeds for its intervals, got {list(seeds)}")
    oracle, unlearned = oracle_sequence(requests)
    out = Path(out_dir)
    common = {**options, "checkpoints": False, "probe": partial(AuditProbe, unlearned)}
    return {
        "unlearned": run_experiments(methods, seeds, config, out / "unlearned",
                                     requests=requests, **common),
        "oracle": run_experiments(methods, seeds, config, out / "oracle", requests=oracle,
                                  **common),
        "reference": run_experiments(methods, seeds, config, out / "reference",
                                     requests=oracle, train_seed_offset=REFERENCE_SEED_OFFSET,
                                     **common),
    }


def _by_method(records: Sequence[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r in records:
        out.setdefault(r["method"], {})[r["seed"]] = r
    return out


def _provenance_cell(records: Sequence[dict], key: str) -> str:
    results = [r["probe"]["provenance"] for r in records]
    if any(res is None for res in results):
        return "n/a"
    checks = [c[key] for res in results for c in res]
    failed = checks.count(False)
    return "pass" if not failed else f"FAIL ({failed}/{len(checks)})"


def audit_rows(runs: Mapping[str, Sequence[dict]], methods: Sequence[str]) -> list[dict]:
    """One row of measurements per method (see the module docstring), in ``methods`` order.

    :param runs: :func:`run_audit`'s records by role.
    """
    by_role = {role: _by_method(records) for role, records in runs.items()}
    rows = []
    for method in methods:
        unl, ora, ref = (by_role[role][method] for role in ("unlearned", "oracle", "reference"))
        seeds = sorted(unl)
        cpt = unl[seeds[0]]["split"]["classes_per_task"]
        tasks = [int(t) for t in unl[seeds[0]]["probe"]["outputs"]]
        row: dict[str, Any] = {"method": method, "seeds": len(seeds)}
        for name, head_only in (("auc", False), ("auc_head", True)):
            feats, labels, groups = [], [], []
            for s in seeds:
                for label, record in ((1, unl[s]), (0, ora[s])):
                    for t in tasks:
                        feats.append(model_features(record["probe"]["outputs"][str(t)], t, cpt,
                                                    head_only))
                        labels.append(label)
                        groups.append(s)
            labels_arr, groups_arr = np.array(labels), np.array(groups)
            scores = distinguisher_scores(np.array(feats), labels_arr, groups_arr)
            row[name], row[f"{name}_low"], row[f"{name}_high"] = bootstrap_auc_interval(
                scores, labels_arr, groups_arr)
        js_gap, mia_loss, mia_feat = [], [], []
        for s in seeds:
            outs = {role: d[s]["probe"]["outputs"] for role, d in
                    (("u", unl), ("o", ora), ("r", ref))}
            js_gap.append(np.mean([_mean_js(outs["u"][str(t)], outs["r"][str(t)], cpt)
                                   - _mean_js(outs["o"][str(t)], outs["r"][str(t)], cpt)
                                   for t in tasks]))
            mia_u = np.mean([membership_aucs(outs["u"][str(t)], t, cpt) for t in tasks], axis=0)
            mia_o = np.mean([membership_aucs(outs["o"][str(t)], t, cpt) for t in tasks], axis=0)
            mia_loss.append(mia_u[0] - mia_o[0])
            mia_feat.append(mia_u[1] - mia_o[1])
        for name, values in (("js_gap", js_gap), ("mia_loss_gap", mia_loss),
                             ("mia_feature_gap", mia_feat)):
            row[name], row[f"{name}_low"], row[f"{name}_high"] = t_interval(values)
        records = [unl[s] for s in seeds]
        row["provenance"] = _provenance_cell(records, "direct_pass")
        row["provenance_strict"] = _provenance_cell(records, "strict_pass")
        a_l = [r["metrics"]["A_l"] for r in records if r["metrics"]["A_l"] is not None]
        row["A_l"], row["A_l_std"] = float(np.mean(a_l)), float(np.std(a_l, ddof=1))
        row["unlearn_seconds"] = float(np.mean([r["timings"]["unlearn_seconds"]
                                                for r in records]))
        rows.append(row)
    return rows


def interval_cell(row: Mapping[str, Any], name: str, digits: int = 3) -> str:
    """``"0.512 [0.40, 0.63]"``: a measurement with its interval."""
    return (f"{row[name]:.{digits}f} [{row[name + '_low']:.{digits}f}, "
            f"{row[name + '_high']:.{digits}f}]")


def separated(row: Mapping[str, Any], name: str, null: float) -> bool:
    """Whether the interval of ``name`` excludes the null value (0.5 for AUCs, 0 for gaps)."""
    return not row[f"{name}_low"] <= null <= row[f"{name}_high"]

