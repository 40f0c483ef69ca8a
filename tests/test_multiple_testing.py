"""Holm and Benjamini–Hochberg: the one implementation every estimator's ``detected`` uses."""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.errors import EstimationError
from estimators.multiple_testing import (
    CONTROLS,
    benjamini_hochberg,
    detect,
    holm,
    last_step_level,
)


def test_holm_and_bh_on_a_worked_example():
    p = np.array([0.001, 0.02, 0.03, 0.5])
    assert holm(p, 0.05).tolist() == [True, False, False, False]    # 0.02 > 0.05/3 stops Holm
    assert benjamini_hochberg(p, 0.05).tolist() == [True, True, True, False]  # 0.03 <= 3·0.05/4


def test_holm_rejects_more_than_bonferroni_when_it_should():
    p = np.array([0.01, 0.02, 0.9])      # Bonferroni level 0.05/3 = 0.0167 keeps only 0.01
    assert holm(p, 0.05).tolist() == [True, True, False]    # 0.02 <= 0.05/2 at Holm's second step


def test_nan_p_values_are_never_detected_and_order_does_not_matter():
    p = np.array([np.nan, 1e-9, 0.2, np.nan, 1e-4])
    for rule in (holm, benjamini_hochberg):
        out = rule(p, 0.05)
        assert out.tolist() == [False, True, False, False, True]
        perm = np.random.default_rng(0).permutation(len(p))
        assert (rule(p[perm], 0.05) == out[perm]).all()
    assert holm(np.array([]), 0.05).shape == benjamini_hochberg(np.array([]), 0.05).shape == (0,)


def test_nesting_bonferroni_holm_bh_on_random_p_values():
    rng = np.random.default_rng(7)
    for _ in range(200):
        p = np.concatenate([rng.uniform(size=20), rng.uniform(0, 0.01, size=rng.integers(0, 6))])
        bonferroni = p <= 0.05 / len(p)
        h, bh = holm(p, 0.05), benjamini_hochberg(p, 0.05)
        assert (h >= bonferroni).all() and (bh >= h).all()


def test_detect_dispatches_and_validates():
    p = np.array([0.001, 0.02, 0.03, 0.5])
    assert CONTROLS == ("fwer", "fdr")
    assert (detect(p, 0.05, "fwer") == holm(p, 0.05)).all()
    assert (detect(p, 0.05, "fdr") == benjamini_hochberg(p, 0.05)).all()
    for bad in ("FWER", "holm", "bh", "bonferroni"):
        with pytest.raises(EstimationError, match="control must be one of fwer, fdr"):
            detect(p, 0.05, bad)


def test_last_step_level_is_where_each_procedure_stopped():
    assert last_step_level(1, 4, 0.05, "fwer") == pytest.approx(0.05 / 4)
    assert last_step_level(3, 4, 0.05, "fwer") == pytest.approx(0.05 / 2)
    assert last_step_level(3, 4, 0.05, "fdr") == pytest.approx(3 * 0.05 / 4)
