"""The refusal threshold is stored per embedding model; the REFUSAL_MIN_SCORE setting overrides it; an uncalibrated
model without the setting is a start-up error naming the command that measures it. Pure logic, no server."""

from __future__ import annotations

import pytest

from agent.config.settings import Settings
from tools.model_specs import MODEL_SPECS


def test_calibrated_model_uses_its_own_threshold() -> None:
    settings = Settings.model_validate({"embedder_model": "all-minilm-l6-v2"})
    assert settings.refusal_min_score is None
    assert settings.refusal_threshold() == MODEL_SPECS["all-minilm-l6-v2"].refusal_min_score == 0.42


def test_setting_overrides_the_model_value() -> None:
    settings = Settings.model_validate({"embedder_model": "all-minilm-l6-v2", "refusal_min_score": 0.5})
    assert settings.refusal_threshold() == 0.5
    assert (
        Settings.model_validate({"embedder_model": "bge-large-en-v1.5", "refusal_min_score": -1}).refusal_threshold()
        == -1
    )


def test_uncalibrated_model_without_setting_names_the_command() -> None:
    assert MODEL_SPECS["bge-large-en-v1.5"].refusal_min_score is None
    settings = Settings.model_validate({"embedder_model": "bge-large-en-v1.5"})
    with pytest.raises(ValueError, match=r"bge-large-en-v1\.5.*REFUSAL_MIN_SCORE.*python -m evals\.refusal"):
        settings.refusal_threshold()


def test_every_threshold_is_a_cosine() -> None:
    for spec in MODEL_SPECS.values():
        assert spec.refusal_min_score is None or -1.0 <= spec.refusal_min_score <= 1.0, spec.name
