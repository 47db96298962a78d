"""The exactness audit report's text (:mod:`pall_avalanche.paper.audit` writes it): the notes
on what its measures are and what its verdicts rest on (:func:`notes`), and the table's cells
(:func:`cells`), from :func:`~pall_avalanche.audit.summary.summarise`'s rows."""

from __future__ import annotations

import pandas as pd

from pall_avalanche.audit.plans import plan_for
from pall_avalanche.catalog import method_label

__all__ = ["cells", "notes", "replication_cell"]


def notes(summary, reference_seed_offset: int, n_permutations: int) -> tuple[str, ...]:
    """The report's notes on the audit's measures and on what its verdicts rest on."""
    from pall_avalanche.audit.summary import FAMILY_SIZE
    from pall_avalanche.audit.verdict import ALPHA, EQUIVALENCE_MARGIN, SIMULTANEOUS_LEVEL

    rows = {r["method"]: r for r in summary.rows}

    def gap(method: str) -> str:
        row = rows[method]
        return (f"gap {row['leak_auc']:+.3f}, p {row['leak_auc_p_adj']:.3g}"
                if "leak_auc_p_adj" in row else "not measured")

    def spread(method: str) -> str:
        return f"; {replication_cell(rows[method])}" if rows[method].get("replications") else ""

    controls = dict.fromkeys(plan_for(m).control for m in rows)
    power = "; ".join(
        f"{plan_for(c).kind}: {method_label(c)} "
        + ("not run" if c not in rows else
           f"{'detected' if summary.powered.get(c) else 'NOT detected'} ({gap(c)})")
        for c in controls)

    def kind_leaks(kind: str, leaks: list[dict]) -> str:
        found = [r for r in leaks if r["detected"]]
        anchor = {"subnetworks in one network": "pall", "a model per task": "independent"}.get(
            kind)
        return (f"{kind}: "
                + "; ".join(f"{method_label(r['method'])}: {gap(r['method'])}"
                            f"{'' if r['detected'] else ', not detected'}{spread(r['method'])}"
                            for r in leaks)
                + (f"; {method_label(anchor)} itself (f = 0): {gap(anchor)}"
                   if anchor in rows else "")
                + (f" — the smallest detected: {method_label(found[-1]['method'])}, "
                   f"per-example gap {found[-1]['leak_auc']:+.3f}" if found
                   else " — none detected"))

    by_kind = summary.leaks_detected()
    counts = {r.get("replications") for r in summary.rows if r.get("replications")}
    channels = (
        "Leaks of known size (gap and adjusted p at the audit's seed"
        + (f", then over {max(counts)} replications, the audit's seed and the next ones, each "
           "another class split, initialisation and so model, the kept entries' positions "
           "drawn once per task: the gaps' mean [smallest, largest] and in how many the leak "
           "test rejects, alone at half the family-wise level, Holm's first step; "
           if counts else "; one replication: one class split, initialisation and draw; ")
        + "PALL's variants leak PALL's channels, the others the update of a dense network or "
        "the model of a task) — "
        + ". ".join(kind_leaks(kind, leaks) for kind, leaks in by_kind.items()) + ". "
        + ("Without leaky variants of their own channels (the smallest detected leak not "
           "measured): " + ", ".join(method_label(m) for m in rows if not plan_for(m).leaks)
           + "." if any(not plan_for(m).leaks for m in rows) else "")
    ) if by_kind else ("Leaks of known size: none run; the smallest detected leak is not "
                       "measured.")
    drawn = [r for r in summary.rows if r.get("spread_draws") and r.get("replications")]
    design = ("Shadow runs over several seeds, measured (never a verdict): the runs of the "
              "positive controls and leaky variants at the replications' seeds drawn as "
              f"{drawn[0]['spread_draws']} disjoint experiments of {drawn[0]['spread_runs']} "
              "runs each, as many at every seed (the cost of one seed's; every example fitted "
              "on its own seed's runs), against one seed's experiment: mean gap (detected) — "
              + "; ".join(f"{method_label(r['method'])}: one seed "
                          f"{r['leak_auc_rep_mean']:+.3f} ({r['detected_replications']}/"
                          f"{r['replications']}), spread {r['leak_auc_spread_mean']:+.3f} "
                          f"({r['spread_detected']}/{r['spread_draws']})" for r in drawn)
              + f". In all: detected in {sum(r['detected_replications'] for r in drawn)} of "
              f"{sum(r['replications'] for r in drawn)} one-seed experiments, "
              f"{sum(r['spread_detected'] for r in drawn)} of "
              f"{sum(r['spread_draws'] for r in drawn)} spread ones; the verdicts keep one "
              "seed's shadow runs." if drawn else None)
    resolution = (f"Resolution: the smallest adjusted p-value a primary test can reach is "
                  f"{summary.smallest_p:.3g}, Eq. 1's {summary.smallest_eq1_p:.3g} with "
                  f"{summary.n_seeds} seeds")
    if max(summary.smallest_p, summary.smallest_eq1_p) >= ALPHA:
        resolution += (f": at or above {ALPHA:g}, so some tests cannot detect anything here "
                       "(more permutations or seeds)")
    return (
        f"Families: every method is judged by its own two primary tests, the per-example attack "
        f"against its control and Eq. 1 (all heads), Holm-corrected together (family-wise "
        f"{ALPHA:g}, {FAMILY_SIZE} tests), so its verdict is the same whichever other methods "
        "the command audits; the task-level attack, the per-example maximum, Eq. 1 on t's "
        "head, unpaired Eq. 1, KLoM and the canary test are instruments, printed with their "
        "raw p-values; they never make a verdict, but one rejecting stops an exact claim; the "
        "data-swap pair and provenance are white-box evidence beside them. 'leaks D^t' and "
        "'distinguishable from never-learned' name the test that rejected; the second says the "
        "model differs from one that never learned t, not that the difference is D^t.",
        f"Power: per kind of model, its positive control (unlearning that changes nothing) "
        f"detected by its own per-example attack at family-wise {ALPHA:g}; a method whose "
        f"control is not detected is 'no power' — {power}.",
        f"Exact within ε: for a method registered exact, the per-example gap's simultaneous "
        f"upper bound (one-sided {SIMULTANEOUS_LEVEL:.1%}, so that both primary tests' bounds "
        f"hold together at {1 - ALPHA:.0%}) below ε = {EQUIVALENCE_MARGIN:g} AUC (half the "
        "smallest keep-everything gap the previous edition measured, Sequential's +0.091), "
        f"and no instrument rejecting at raw {ALPHA:g} (the canary test, which measures TPR at "
        "0.1 % FPR, among them); 'not shown' when either fails (the instrument named), 'NOT "
        "supported' when a primary test rejects.",
        channels,
        *((design,) if design else ()),
        resolution + ".",
        f"Tests: permutation p-values ({n_permutations:,} permutations per test, the whole fit "
        "redone per permutation). 'p' of a primary test is adjusted within the method's "
        "family, of an instrument raw.",
        "Attacked: the shadow runs at the end and right after every unlearning request that a "
        "learning request follows (on R, after U1, before L4; the oracle runs at the aligned "
        "request, after L3): the model right after U1 is the final model of R without L4, a "
        "sequence in which no learning request follows the unlearning. A gap is the worse of "
        "the times (named in brackets), its null the largest gap under each permutation; the "
        "simultaneous bound covers both times. Eq. 1 reads its runs at the same two times "
        "(the larger AUC, its null the larger AUC under each swap); KLoM reads the final "
        "models.",
        "IN/OUT attack (per example, U-LiRA style): shadow runs learn t on a random half of its "
        "training set and unlearn it; per example, the logit-scaled confidence of its label "
        "under t's head and every later task's head is fitted with Gaussians over the other "
        "runs where it was IN and where it was OUT (leave one run out); 'gap' = the attack's "
        "AUC minus the same attack's AUC on oracles that never learned t (the control); its "
        "null permutes every example's memberships across runs in both. TPR at an FPR is "
        "printed only where ≥ 10/FPR independent negatives (distinct target examples) carry "
        "it, else n/a. Per-example maximum: per target example, the AUC of its scores in the "
        "runs where it was IN against those where it was OUT; the largest over the examples, "
        "minus the control's, under the same permutations.",
        "Canary test (one-run auditing): per method, one run of R per canary seed, each with "
        "its own class split and initialisation and its canaries — training inputs of t with "
        "their entries in a random order and a random label of t's classes — each added to "
        "t's training set with probability 1/2; each canary's score is the logit-scaled "
        "confidence of its label under t's head, read at the same times as the shadow runs "
        "(the worse); AUC and TPR at 1 % and 0.1 % FPR of the included canaries against the "
        "left-out ones, pooled over the runs. Which canaries trained is random, so after an "
        "exact unlearning both kinds are exchangeable: the null permutes the inclusions "
        "within each run (exact, no oracle runs needed).",
        "Eq. 1: a ridge classifier (standardised summary features of the model's outputs on "
        "t's training inputs, all heads / t's head only) tells unlearned from never-learned, "
        "cross-validated with each seed's pair in one fold; its null swaps the pair's labels "
        "within seeds. Unpaired: the unlearned models of every other seed against the oracles "
        "of the others (half the models; no two share a class split or initial weights), its "
        "null permutes the labels among all of them. KLoM: per example of t, the KL of "
        "Gaussians fitted to its margin in the unlearned shadow runs and in the oracle shadow "
        "runs where it was IN (the pair of a training seed shares its memberships); the median "
        "and the worst decile over t's examples, null: swaps within pairs, and unpaired: all "
        "runs shuffled between the two sides (the pairs also share their class split and "
        "initial weights, which the paired null conditions on). Over all runs, and for the "
        "retained tasks' and the test examples, in the CSV (klom_*).",
        "Retained-set exposure: per shadow run, the AUC of the remaining tasks' buffer members "
        "against their other training examples (confidence under their own head), after the "
        "unlearning request minus before (mean over runs, Student-t 95 %); n/a without a "
        "buffer.",
        "Relapse: after t's unlearning, the largest rise of t's test accuracy over the rest of "
        "the sequence (mean over seeds with a Student-t interval, the worst record in "
        "brackets), beside the oracle's: the same statistic on the never-learned t's accuracy "
        "over the aligned rows. Relearning: the final model fine-tuned on k samples per class "
        "of t against the oracle fine-tuned the same way (accuracy gap after 10 steps). "
        f"JS and MIA gaps against a reference oracle (training seed +{reference_seed_offset}) "
        "are in the CSV.",
        "Provenance (subnetwork methods), white-box: 'direct' — every entry trained with D^t "
        "or B^t re-drawn; 'strict' — also every entry later tasks trained with t's weights in "
        "the forward pass, and no remaining buffer's logits computed with t present; 'FAIL "
        "(k/n)': k of n unlearning requests over the seeds. An entry that changes during t's "
        "unlearning request counts as re-drawn, unless that request's retraining replayed "
        "B^t (read from the replay steps' event): then every entry it retrained counts as "
        "trained with B^t and left.",
        "Data-swap pair, white-box: two runs identical in everything (seed, split, initial "
        "weights, training seed) but t's training data, each trained on another half of D^t "
        "(same classes, same size); the strategy's whole state right after t's unlearning "
        "request (model, masks, buffers, the method's and plugins' attributes; the request "
        "log aside), compared bit for bit: 'state identical', or how many entries differ in "
        "which part of the state. One pair per method, on the first seed.",
        "Learning: 't not learned' counts the runs (Eq. 1 seeds and shadow runs) whose "
        "audited task was at chance on its own training data right after learning it; a "
        "method with any is 'not measurable'.",
    )


def replication_cell(row: dict) -> str:
    """``"over 3 replications +0.150 [+0.120, +0.171], detected in 3/3"``."""
    count = int(row["replications"])      # a float in a frame column with gaps
    return (f"over {count} replications {row['leak_auc_rep_mean']:+.3f} "
            f"[{row['leak_auc_rep_min']:+.3f}, {row['leak_auc_rep_max']:+.3f}], detected in "
            f"{int(row['detected_replications'])}/{count}")


def cells(frame: pd.DataFrame) -> pd.DataFrame:
    from pall_avalanche.audit import interval_cell
    from pall_avalanche.audit.verdict import ALPHA

    rows = frame.to_dict("records")

    def known(row: dict, *names: str) -> bool:
        return all(row.get(key) == row.get(key) and row.get(key) is not None for key in names)

    def interval(name: str, digits: int, scale: float = 1.0) -> list[str]:
        keys = (name, f"{name}_low", f"{name}_high")
        return [interval_cell({k: r[k] * scale for k in keys}, name, digits)
                if known(r, *keys) else "n/a" for r in rows]

    def tested(name: str, bound: str | None = "bound") -> list[str]:
        out = []
        for r in rows:
            if not known(r, name, f"{name}_p_adj"):
                out.append("n/a")
                continue
            text = f"{r[name]:+.3f}" if name.startswith("leak") else f"{r[name]:.3f}"
            if known(r, f"{name}_time"):
                text += f" ({r[f'{name}_time']})"
            text += f" (p {r[f'{name}_p_adj']:.3g}"
            if bound and known(r, f"{name}_{bound}"):
                text += f"; ≤ {r[f'{name}_{bound}']:+.3f}" if name.startswith("leak") else \
                    f"; ≤ {r[f'{name}_{bound}']:.3f}"
            out.append(text + ")")
        return out

    def tpr(fpr: float) -> list[str]:
        key = f"attack_tpr@{fpr:g}"
        return [f"{100 * r[key]:.1f}" if known(r, key, "attack_negatives")
                and r["attack_negatives"] >= 10 / fpr else "n/a" for r in rows]

    def canary_tpr(fpr: float) -> list[str]:
        key = f"canary_tpr@{fpr:g}"
        return [f"{100 * r[key]:.1f} (p {r[f'{key}_p']:.3g}; {int(r['canary_negatives']):,} "
                "negatives)" if known(r, key, f"{key}_p", "canary_negatives") else "n/a"
                for r in rows]

    def relapse(prefix: str) -> list[str]:
        return [f"{c} ({r[prefix + '_max']:.2f})" if c != "n/a" and known(r, prefix + "_max")
                else c for c, r in zip(interval(prefix, 2), rows, strict=True)]

    by_method = {r["method"]: r for r in rows}

    def smallest_leak(row: dict) -> str:
        """The smallest leak of the row's kind its attack detected (its plan's variants)."""
        leaks = [by_method[m] for m in plan_for(row["method"]).leaks
                 if m in by_method and known(by_method[m], "leak_auc", "leak_auc_p_adj")]
        if not leaks:
            return "not measured" if not plan_for(row["method"]).leaks else "not run"
        found = [r for r in leaks if r["leak_auc_p_adj"] < ALPHA]
        if not found:
            return "none detected"
        least = min(found, key=lambda r: r["leak_auc"])
        extra = f"; {replication_cell(least)}" if known(least, "replications") else ""
        return f"{least['leak_auc']:+.3f} ({method_label(least['method'])}{extra})"

    def swap(row: dict) -> str:
        if not known(row, "swap_entries"):
            return "n/a"
        if row["swap_entries"] == 0:
            return "state identical"
        return (f"{row['swap_entries']:,} entries differ ("
                + "; ".join(f"{name} {n:,}" for name, n in row["swap_channels"].items()) + ")")

    def power(row: dict) -> str:
        control = method_label(plan_for(row["method"]).control)
        return {True: control, False: f"none ({control} not detected)",
                None: f"not shown ({control} not run)"}[row.get("powered")]

    learned = [f"{r.get('not_learned', 0) + r.get('shadow_not_learned', 0)}/"
               f"{r.get('seeds', 0) + r.get('shadow_runs', 0)}" for r in rows]
    return pd.DataFrame({
        "Method": [method_label(r["method"]) for r in rows],
        "Verdict": [r["verdict"] for r in rows],
        "Power shown by": [power(r) for r in rows],
        "Smallest detected leak of its kind (per-example gap)": [smallest_leak(r)
                                                                 for r in rows],
        "t not learned": learned,
        "IN/OUT AUC (per example)": interval("attack_auc", 3),
        "Control AUC": interval("control_auc", 3),
        "Gap to control, per example (primary; simultaneous bound)": tested("leak_auc"),
        "Eq. 1 AUC, all heads (primary)": tested("auc", None),
        "Gap to control, task level (instrument, raw p)": tested("leak_inout_auc", None),
        "Gap to control, per-example maximum (instrument, raw p)": tested(
            "leak_max_example_auc", None),
        "TPR % at 1 % FPR": tpr(0.01),
        "Canary AUC (instrument, raw p)": tested("canary_auc", None),
        "Canary TPR % at 0.1 % FPR (raw p)": canary_tpr(0.001),
        "Eq. 1 AUC, t's head (instrument, raw p)": tested("auc_head", None),
        "Eq. 1 AUC, unpaired (instrument, raw p)": tested("auc_unpaired", None),
        "KLoM on t (IN runs), median": [f"{r['klom_forget_in_q0.5']:.3f}"
                                        if known(r, "klom_forget_in_q0.5") else "n/a"
                                        for r in rows],
        "KLoM on t (IN runs), worst decile (instrument, raw p)": tested("klom_forget_in_q0.9",
                                                                        None),
        "The same, unpaired null (instrument, raw p)": tested("klom_forget_in_unpaired_q0.9",
                                                               None),
        "Retained-set exposure Δ": interval("retained_change", 3),
        "Relapse (worst)": relapse("relapse"),
        "Oracle relapse (worst)": relapse("relapse_oracle"),
        "Relearning Δacc, k=5, head": interval("relearn_k5_head_acc_gap", 1),
        "Data-swap pair, state after t's unlearning (white-box)": [swap(r) for r in rows],
        "Provenance, direct": [r["provenance"] if isinstance(r.get("provenance"), str)
                               else "n/a" for r in rows],
        "Provenance, strict": [r["provenance_strict"]
                               if isinstance(r.get("provenance_strict"), str) else "n/a"
                               for r in rows],
        "A_l": [f"{r['A_l']:.2f} ± {r['A_l_std']:.2f}" if known(r, "A_l") else "n/a"
                for r in rows],
    })
