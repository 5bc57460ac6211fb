"""Ranking sub-networks from their features (``python -m fairseq_plugins.search rank``).

RankNAS (Hu et al., EMNLP 2021) ranks architectures by *pairwise* ranking instead of predicting their score:
a search only needs the order. Here the pairwise model is LightGBM's ``LGBMRanker`` with the LambdaRank
objective, trained on random groups of at most ``GROUP_SIZE`` training architectures whose labels are their
ranks inside the group (the best gets the highest label), so that every pair of a group with different
targets is a training pair; the training set is regrouped ``REGROUPINGS`` times. Beside it, the pointwise
baseline the mixed-attention paper's code uses: ``LGBMRegressor`` on the target itself. Both are scored on
held-out architectures by Kendall's tau between the predicted and the measured order and by the share of
correctly ordered pairs (pairs with equal measured targets left out).

The saved models are LightGBM text files; ``Predictor`` loads either (the ranker gives scores, higher =
better; the regressor gives the target, e.g. milliseconds of latency, which the constraints need).
"""
import hashlib
import json
import os
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..files import TextFileError, atomic_output, read_text, write_json
from ..models.architecture import Architecture
from ..modules import AttentionConfigError
from .features import FeatureEncoder
from .space import SearchSpace

# --target -> (what `collect` collected, the field of its records); relative_latency: the latency over the
# reference's measured beside it (latency.measure), what holds on a shared machine
TARGETS = {"loss": ("loss", "loss"), "latency": ("latency", "latency_ms"), "relative_latency": ("latency", "relative_latency")}
GROUP_SIZE = 32
REGROUPINGS = 5
# Small trees for a few hundred architectures; one thread and fixed seeds: the same models on every run.
LIGHTGBM_PARAMETERS = dict(n_estimators=300, learning_rate=0.05, num_leaves=15, min_child_samples=5, subsample=0.8,
                           subsample_freq=1, colsample_bytree=0.8, n_jobs=1, deterministic=True, force_row_wise=True,
                           verbose=-1)


class RankingError(AttentionConfigError):
    """Data or models the ranking cannot use; the message names the file."""


# ------------------------------------------------------------------- data ---
def read_collected(path: str, target: str) -> Tuple[SearchSpace, List[Architecture], List[float], dict]:
    """The space, architectures and targets of a ``collect`` file (its header and its measured records;
    dropped records, whose latency spread stayed too large, are left out)."""
    from .collect import read_collection

    header, records = read_collection(path)
    what, field = TARGETS[target]
    if header["what"] != what:
        raise RankingError(f"--data {path}: collected {header['what']}, not {what} (--target {target})")
    space = SearchSpace.from_dict(header["space"], f"--data {path} (its header's space)")
    kept = [r for r in records if not r.get("dropped")]
    if any(field not in r for r in kept):
        raise RankingError(f"--data {path}: its records have no {field} (collected before the relative latency was "
                           "measured: collect again into another file)")
    if len(kept) < 10:
        raise RankingError(f"--data {path}: {len(kept)} measured architectures; at least 10 are needed to fit and test a ranker")
    architectures = [Architecture.from_dict(r["architecture"]) for r in kept]
    return space, architectures, [float(r[field]) for r in kept], header


def split(n: int, test_fraction: float, seed: int) -> Tuple[List[int], List[int]]:
    """(training, held-out) indices: a seeded shuffle, the last ``test_fraction`` held out."""
    if not 0 < test_fraction < 1:
        raise RankingError(f"--test-fraction: expected a fraction in (0, 1), got {test_fraction}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = max(2, int(round(n * test_fraction)))
    if n - held < 2:
        raise RankingError(f"{n} architectures leave fewer than 2 to train on with --test-fraction {test_fraction}")
    return sorted(order[:n - held]), sorted(order[n - held:])


def ranking_groups(targets: Sequence[float], seed: int) -> Tuple[List[int], List[int], List[int]]:
    """(row indices, labels, group sizes) for LambdaRank: the rows regrouped ``REGROUPINGS`` times into random
    groups of at most ``GROUP_SIZE``; a row's label is its rank in its group by target (lowest target: the
    highest label; equal targets: equal labels)."""
    rng = random.Random(seed)
    rows, labels, sizes = [], [], []
    for _ in range(REGROUPINGS):
        order = list(range(len(targets)))
        rng.shuffle(order)
        for start in range(0, len(order), GROUP_SIZE):
            group = order[start:start + GROUP_SIZE]
            if len(group) < 2:
                continue
            distinct = sorted({targets[i] for i in group}, reverse=True)  # worst first: label 0
            rows += group
            labels += [distinct.index(targets[i]) for i in group]
            sizes.append(len(group))
    return rows, labels, sizes


# ---------------------------------------------------------------- metrics ---
def kendall(first: Sequence[float], second: Sequence[float]) -> Tuple[float, float]:
    """Kendall's tau-b between two orders and its two-sided p-value (scipy)."""
    from scipy.stats import kendalltau

    result = kendalltau(first, second)
    return float(result.statistic), float(result.pvalue)


def kendall_tau(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return kendall(predicted, measured)[0]


def pair_accuracy(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """The share of pairs with different measured values that ``predicted`` orders the same way (a tie in
    ``predicted`` counts half)."""
    right = total = 0.0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            if measured[i] == measured[j]:
                continue
            total += 1
            agreement = (predicted[i] - predicted[j]) * (measured[i] - measured[j])
            right += 1.0 if agreement > 0 else (0.5 if agreement == 0 else 0.0)
    return right / total if total else float("nan")


def relative_errors(predicted: Sequence[float], measured: Sequence[float], within: float = 0.1) -> dict:
    """|predicted - measured| / measured: its mean, and the share of architectures within ``within`` (issue 33
    judges a latency predictor by the share within 10 %)."""
    errors = [abs(p - m) / abs(m) for p, m in zip(predicted, measured) if m != 0]
    if not errors:
        return {}
    return {"mean_relative_error": sum(errors) / len(errors), "within_10_percent": sum(e <= within for e in errors) / len(errors)}


# ----------------------------------------------------------------- models ---
def fit_ranker(features, targets, seed: int):
    import lightgbm

    rows, labels, sizes = ranking_groups(targets, seed)
    model = lightgbm.LGBMRanker(objective="lambdarank", random_state=seed, lambdarank_truncation_level=GROUP_SIZE,
                                label_gain=list(range(GROUP_SIZE)), **LIGHTGBM_PARAMETERS)
    model.fit([features[i] for i in rows], labels, group=sizes)
    return model


def fit_regressor(features, targets, seed: int):
    import lightgbm

    model = lightgbm.LGBMRegressor(objective="regression", random_state=seed, **LIGHTGBM_PARAMETERS)
    model.fit(features, targets)
    return model


@dataclass
class Fitted:
    ranker: object
    regressor: object
    encoder: FeatureEncoder
    report: dict


HELD_OUT_SPLITS = 10
# The trivial predictors the models must beat: a least-squares line on one feature alone (counted size, or a
# layer count; the review of issue 33 found a line on the decoder's layer count as good as the first predictor)
LINE_FEATURES = ("parameters", "flops", "encoder.layers", "decoder.layers")


def fit_line(x: Sequence[float], y: Sequence[float]) -> Tuple[float, float]:
    """(slope, intercept) of the least-squares line; a constant ``x`` predicts the mean."""
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.ptp(x) == 0:
        return 0.0, float(y.mean())
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def held_out_comparison(features, targets: Sequence[float], test_fraction: float, seed: int,
                        splits: int = HELD_OUT_SPLITS, names: Sequence[str] = ()) -> dict:
    """Both models fitted and scored on ``splits`` random held-out splits (seeds seed, seed + 1, ...): one
    split's tau moves with which architectures it happens to hold out, so the comparison is the mean and
    spread over many, and how often the pairwise ranker's tau beats the pointwise one's; beside them
    (``lines``), a line on each of ``LINE_FEATURES`` among the feature ``names``, on the same splits."""
    import numpy as np

    taus = {"pairwise": [], "pointwise": []}
    pooled = ([], [])  # the regressor's predictions and the measured targets of every split's held-out part
    within_shares = []
    line_columns = {name: list(names).index(name) for name in LINE_FEATURES if name in names}
    lines = {name: {"predicted": [], "kendall_taus": []} for name in line_columns}
    for offset in range(splits):
        train, test = split(len(targets), test_fraction, seed + offset)
        ranker = fit_ranker([features[i] for i in train], [targets[i] for i in train], seed + offset)
        regressor = fit_regressor([features[i] for i in train], [targets[i] for i in train], seed + offset)
        held_out, measured = [features[i] for i in test], [targets[i] for i in test]
        taus["pairwise"].append(kendall_tau([-v for v in ranker.predict(held_out)], measured))
        predicted = list(regressor.predict(held_out))
        taus["pointwise"].append(kendall_tau(predicted, measured))
        pooled[0].extend(predicted)
        pooled[1].extend(measured)
        within_shares.append(relative_errors(predicted, measured)["within_10_percent"])
        for name, column in line_columns.items():
            slope, intercept = fit_line([features[i][column] for i in train], [targets[i] for i in train])
            line = [slope * row[column] + intercept for row in held_out]
            lines[name]["predicted"].extend(line)
            lines[name]["kendall_taus"].append(kendall_tau(line, measured))
    # (numpy: a split whose held-out targets are all equal has no order, a nan tau, left out of the mean)
    summary = {name: {"mean": float(np.nanmean(values)) if not np.isnan(values).all() else float("nan"),
                      "std": float(np.nanstd(values, ddof=1)) if np.count_nonzero(~np.isnan(values)) > 1 else 0.0,
                      "kendall_taus": [float(v) for v in values]} for name, values in taus.items()}
    summary["splits"] = splits
    summary["pairwise_better"] = sum(p > q for p, q in zip(taus["pairwise"], taus["pointwise"]))
    # the regressor as a predictor of the target (a latency budget's constraint), judged over every split:
    # the share within 10 % pooled over all held-out predictions, and its mean and spread per split
    summary["pointwise"].update(
        **relative_errors(*pooled),
        within_10_percent_per_split={"mean": float(np.mean(within_shares)),
                                     "std": float(np.std(within_shares, ddof=1)) if len(within_shares) > 1 else 0.0},
        held_out_predictions=len(pooled[0]))
    summary["lines"] = {name: {**relative_errors(line["predicted"], pooled[1]),
                               "kendall_tau": float(np.nanmean(line["kendall_taus"]))}
                        for name, line in lines.items()}
    return summary


def fit_and_evaluate(space: SearchSpace, architectures: Sequence[Architecture], targets: Sequence[float],
                     test_fraction: float = 0.2, seed: int = 1, splits: int = HELD_OUT_SPLITS) -> Fitted:
    """Both models on the training part, scored on the held-out part (module docstring); then both refitted
    on every architecture (the saved models), with their feature importances (total gain)."""
    encoder = FeatureEncoder(space)
    features = encoder.matrix(architectures)
    train, test = split(len(architectures), test_fraction, seed)
    ranker = fit_ranker([features[i] for i in train], [targets[i] for i in train], seed)
    regressor = fit_regressor([features[i] for i in train], [targets[i] for i in train], seed)
    measured = [targets[i] for i in test]
    held_out = [features[i] for i in test]
    # the ranker's score is higher for better (lower-target) architectures: its predicted target order is -score
    predicted = {"pairwise": [-s for s in ranker.predict(held_out)], "pointwise": list(regressor.predict(held_out))}
    best = min(range(len(targets)), key=lambda i: (targets[i], architectures[i].to_json()))
    report = {"architectures": len(architectures), "train": len(train), "held_out": len(test), "seed": seed,
              "best_architecture": architectures[best].to_dict(), "best_target": targets[best],
              "test_fraction": test_fraction, "group_size": GROUP_SIZE, "regroupings": REGROUPINGS,
              "lightgbm": dict(LIGHTGBM_PARAMETERS)}
    for name, values in predicted.items():
        report[name] = {"kendall_tau": kendall_tau(values, measured), "pair_accuracy": pair_accuracy(values, measured)}
    if splits > 1:
        report["held_out_splits"] = held_out_comparison(features, list(targets), test_fraction, seed, splits,
                                                        encoder.names)
    # the regressor predicts the target itself (the budgets' constraint): how close, held out
    report["pointwise"].update(relative_errors(predicted["pointwise"], measured))
    ranker = fit_ranker(features, list(targets), seed)
    regressor = fit_regressor(features, list(targets), seed)
    for name, model in (("pairwise", ranker), ("pointwise", regressor)):
        gains = model.booster_.feature_importance(importance_type="gain")
        report[name]["importance"] = {n: float(g) for n, g in sorted(zip(encoder.names, gains), key=lambda x: -x[1])}
    report["pairwise"]["objective"] = "LGBMRanker lambdarank"
    report["pointwise"]["objective"] = "LGBMRegressor l2"
    return Fitted(ranker, regressor, encoder, report)


def save(fitted: Fitted, output_dir: str, data_path: str, target: str) -> Dict[str, str]:
    """Write the two models (LightGBM text files), ``report.json`` (scores, settings, the data file's sha256)
    and ``importance.json`` (the pairwise model's feature importances and the space fields' sums, what
    ``prune`` reads)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"ranker": os.path.join(output_dir, "ranker.txt"), "regressor": os.path.join(output_dir, "regressor.txt"),
             "report": os.path.join(output_dir, "report.json"), "importance": os.path.join(output_dir, "importance.json")}
    for name in ("ranker", "regressor"):
        text = getattr(fitted, name).booster_.model_to_string()
        with atomic_output(paths[name]) as f:
            f.write(text)
    with open(data_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    meta = {"data": data_path, "data_sha256": digest, "target": target, "space": fitted.encoder.space.to_dict(),
            "features": fitted.encoder.names}
    write_json(paths["report"], {**meta, **fitted.report})
    importance = fitted.report["pairwise"]["importance"]
    write_json(paths["importance"], {"target": target, "space": fitted.encoder.space.to_dict(), "features": importance,
                                     "fields": dict(fitted.encoder.field_importance(importance)),
                                     "best_architecture": fitted.report["best_architecture"],
                                     "best_target": fitted.report["best_target"]})
    return paths


class Predictor:
    """A saved model (``ranker.txt`` or ``regressor.txt`` of ``rank``) over the architectures of its space;
    ``option``: the command-line option that named it (for messages)."""

    def __init__(self, model_path: str, option: str = "--ranker"):
        import lightgbm

        self.path, self.option = model_path, option
        report = os.path.join(os.path.dirname(model_path), "report.json")
        if not os.path.isfile(model_path) or not os.path.isfile(report):
            raise RankingError(f"{option} {model_path}: no such model (or no report.json beside it): run `rank` first")
        try:
            meta = json.loads(read_text(report))
            self.target, features = meta["target"], meta["features"]
            self.space = SearchSpace.from_dict(meta["space"], f"{report} (its space)")
        except (TextFileError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise RankingError(f"{option} {model_path}: {report} is not the report.json `rank` writes ({error})") from None
        self.encoder = FeatureEncoder(self.space)
        if self.encoder.names != features:
            raise RankingError(f"{option} {model_path}: its features are not those this version computes: run `rank` again")
        try:
            self.booster = lightgbm.Booster(model_file=model_path)
        except lightgbm.basic.LightGBMError as error:
            raise RankingError(f"{option} {model_path}: not a LightGBM model ({error})") from None
        # what the model predicts, from its own objective (not its file name): lambdarank scores, or the target
        objective = self.booster.params.get("objective") or next(
            (line.split("=", 1)[1].split()[0] for line in self.booster.model_to_string().splitlines()
             if line.startswith("objective=")), "")
        self.is_ranker = objective.startswith("lambdarank")

    def check_space(self, space: SearchSpace, source: str):
        """The model has seen every choice of ``space`` (a kind or a depth it never saw would be extrapolated or
        fail), naming the option and the field otherwise."""
        space.check_within(self.space, source, f"the space {self.option} {self.path} was fitted on")

    def predict(self, architectures: Sequence[Architecture]) -> List[float]:
        """Ranker: scores, higher = better; regressor: the predicted target (none for none: LightGBM takes no
        empty matrix)."""
        if not architectures:
            return []
        return [float(v) for v in self.booster.predict(self.encoder.matrix(architectures))]


def rank_command(data: str, target: str, output_dir: Optional[str], test_fraction: float, seed: int) -> dict:
    space, architectures, targets, _ = read_collected(data, target)
    fitted = fit_and_evaluate(space, architectures, targets, test_fraction, seed)
    output_dir = output_dir or os.path.join(os.path.dirname(os.path.abspath(data)), f"ranker_{target}")
    paths = save(fitted, output_dir, data, target)
    summary = {name: {k: v for k, v in fitted.report[name].items() if k != "importance"} for name in ("pairwise", "pointwise")}
    top = list(fitted.report["pairwise"]["importance"].items())[:5]
    splits = fitted.report.get("held_out_splits")
    over_splits = {name: {k: round(splits[name][k], 4) for k in ("mean", "std")} for name in ("pairwise", "pointwise")} \
        if splits else {}
    if splits:
        over_splits.update(splits=splits["splits"], pairwise_better=splits["pairwise_better"])
        over_splits["pointwise"].update({k: splits["pointwise"][k] for k in ("within_10_percent", "mean_relative_error",
                                                                             "within_10_percent_per_split", "held_out_predictions")})
        over_splits["lines"] = splits["lines"]  # (the trivial predictors on the same splits)
    return {"target": target, "architectures": fitted.report["architectures"], "held_out": fitted.report["held_out"],
            **summary, "over_splits": over_splits, "top_features": top, "files": paths}
