"""The probe's head and artefact (no model: the features are made up)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from juiz.judging.probe import Probe, answer_support, feature_matrix, render_context, train
from schemas.verifier import PROBE_FORMAT, probe_version


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    labels = np.array([1, 0] * 50)
    hidden = rng.normal(size=(100, 2, 8)).astype(np.float32)
    hidden[:, 1, 0] += 3.0 * labels  # the second layer's first unit tells supported claims apart
    p_yes = np.full(100, 0.5, dtype=np.float32)
    return hidden, p_yes, labels


def test_a_probe_learns_the_telling_unit_and_survives_a_round_trip(tmp_path: Path) -> None:
    hidden, p_yes, labels = _data()
    x = feature_matrix(hidden, p_yes, 1)
    probe = train(x, labels, model="m", layer=20, with_p_yes=True, c=1.0, trained_on={"examples": 100})
    p = probe.p_supported(x)
    assert p[labels == 1].mean() > 0.8 > 0.2 > p[labels == 0].mean()
    probe.save(tmp_path / "probe.json")
    again = Probe.load(tmp_path / "probe.json")
    assert again.version == probe.version
    assert np.allclose(again.p_supported(x), p)


def test_the_first_layer_alone_learns_nothing() -> None:
    hidden, p_yes, labels = _data()
    x = feature_matrix(hidden, p_yes, 0, with_p_yes=False)
    p = train(x, labels, model="m", layer=8, with_p_yes=False, c=1.0).p_supported(x)
    assert abs(p[labels == 1].mean() - p[labels == 0].mean()) < 0.2


def test_a_probe_for_another_prompt_is_refused(tmp_path: Path) -> None:
    hidden, p_yes, labels = _data()
    train(feature_matrix(hidden, p_yes, 1), labels, model="m", layer=20, with_p_yes=True).save(tmp_path / "p.json")
    document = json.loads((tmp_path / "p.json").read_text())
    assert document["format"] == PROBE_FORMAT
    document["prompt_hash"] = "another"
    (tmp_path / "p.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="altered"):  # its version no longer matches
        Probe.load(tmp_path / "p.json")
    document["version"] = probe_version("m", 20, "another", document["weights"], document["bias"])
    (tmp_path / "p.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="check prompt"):
        Probe.load(tmp_path / "p.json")


def test_training_needs_both_classes() -> None:
    hidden, p_yes, _ = _data()
    with pytest.raises(ValueError, match="both"):
        train(feature_matrix(hidden, p_yes, 1), np.ones(100, dtype=int), model="m", layer=20, with_p_yes=True)


def test_an_answer_is_as_supported_as_its_least_supported_sentence() -> None:
    assert answer_support([0.9, 0.2, 0.7]) == 0.2
    assert answer_support([]) is None
    assert render_context(["a ", "b"]) == "[1] a\n[2] b"
