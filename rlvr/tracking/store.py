"""Where the MLflow runs live and whether they are recorded at all: one answer for the stage
runs (`stage`), their pipeline parents (`pipeline`), the comparison of two pipeline runs
(`compare`) and the model registry (`registry`), which share one store.

The store is a sqlite file at the repo root unless `MLFLOW_TRACKING_URI` says otherwise
(MLflow's file store is deprecated); `RLVR_TRACKING=off` records nothing.
"""
from __future__ import annotations

import os

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
EXPERIMENT = "rlvr"
TRACKING_ENV = "RLVR_TRACKING"


def tracking_enabled() -> bool:
    return os.environ.get(TRACKING_ENV, "mlflow") != "off"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI)
