"""The RBF-SVM anchor of a study: scikit-learn's ``SVC`` on a run's exact splits."""

from __future__ import annotations

import os
import time
import types
from collections.abc import Sequence

from invjax.run import RESULTS_FILE
from invjax.workdir import write_json_atomic


def svm_fit(point: dict, grid: Sequence[tuple[float, float]]):
    """RBF-SVMs on the point's exact splits (``data.*`` keys, ``seed``; ``data.val_source`` /
    ``data.val_fraction`` where given): one per ``(C, gamma x scale)`` of ``grid``, the lowest
    validation error kept (ties: the first). scikit-learn's 'scale' is
    ``1 / (n_features var(X_train))``; pixels standardised by the training split's mean and std
    (as the networks' inputs). Returns ``(fit, error)``: ``fit`` has ``ds``, ``cfg``, ``clf``,
    ``C``, ``gamma`` (absolute), ``val_error``, ``t0``; ``error(split)`` is the error [%] of
    ``'train'``, ``'val'`` or ``'test'``."""
    import numpy as np
    from sklearn.svm import SVC

    from invjax import data

    t0 = time.perf_counter()
    cfg = data.default_config()
    cfg.name, cfg.n_train, cfg.seed = point["data.name"], point["data.n_train"], point["seed"]
    cfg.realisation = point["data.realisation"]
    if "data.val_source" in point:
        cfg.val_source, cfg.val_fraction = point["data.val_source"], point["data.val_fraction"]
    ds = data.load(cfg)

    def flat(s):
        return ((s.images.reshape(len(s), -1) - ds.mean[0]) / ds.std[0]).astype(np.float64)

    x = {"train": flat(ds.train), "val": flat(ds.val), "test": flat(ds.test)}
    scale = 1.0 / (x["train"].shape[1] * x["train"].var())
    best = None
    for c, g in grid:
        clf = SVC(C=c, gamma=g * scale, kernel="rbf").fit(x["train"], ds.train.labels)
        err = 100.0 * float(np.mean(clf.predict(x["val"]) != ds.val.labels))
        if best is None or err < best[0]:
            best = (err, c, g * scale, clf)
    val_error, c, gamma, clf = best

    def error(split: str) -> float:
        return 100.0 * float(np.mean(clf.predict(x[split]) != getattr(ds, split).labels))

    fit = types.SimpleNamespace(
        ds=ds, cfg=cfg, clf=clf, C=c, gamma=gamma, val_error=val_error, t0=t0
    )
    return fit, error


def write_results(point: dict, fit, errors: dict, hps: dict) -> dict:
    """``point['workdir']/results.json`` (:data:`invjax.run.RESULTS_FILE`) of an SVM fit, as a
    run's: ``errors``, the model's size and splits, ``hps`` (how C and gamma were set), the data
    config and the wall time; written whole or not at all."""
    import ml_collections

    clf, ds = fit.clf, fit.ds
    results = {
        **errors,
        "params": int(clf.support_vectors_.size + clf.dual_coef_.size + clf.intercept_.size),
        "n_train": len(ds.train),
        "n_val": len(ds.val),
        "n_test": len(ds.test),
        "seed": point["seed"],
        "dataset": ds.name,
        "model": "rbf_svm",
        **hps,
        "config": ml_collections.ConfigDict(fit.cfg).to_dict(),
        "wall_time_s": time.perf_counter() - fit.t0,
    }
    os.makedirs(point["workdir"], exist_ok=True)
    write_json_atomic(os.path.join(point["workdir"], RESULTS_FILE), results)
    return results


def run_svm(point: dict) -> dict:
    """The RBF-SVM with fixed ``svm_C`` and ``svm_gamma`` (x scikit-learn's 'scale', i.e.
    ``1 / (784 var(X_train))``) on the point's exact splits; writes ``results.json``."""
    fit, error = svm_fit(point, [(point["svm_C"], point["svm_gamma"])])
    errors = {split + "_error": error(split) for split in ("test", "val", "train")}
    hps = {"svm_C": point["svm_C"], "svm_gamma_times_scale": point["svm_gamma"]}
    return write_results(point, fit, errors, hps)
