"""bench/gpu_check.py's engine comparison, dry-run on the CPU (CI has no GPU): with the same
device on both sides it must find every sample identical and the behaviour logprobs equal to
the teacher-forced ones, so a difference it reports on a GPU comes from the device."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from scriptkit import load_script


def _bench():
    return load_script("bench/gpu_check.py")


@pytest.fixture
def root(tmp_path, policy_dir):
    shutil.copytree(policy_dir, tmp_path / "models" / "policy-sft")
    return tmp_path


def test_engine_case_on_one_device_finds_no_difference(root):
    args = SimpleNamespace(root=root, device="cpu", prompts=2, group=2, new=12)
    out = _bench().engine_case(args)
    assert out["cuda_fp32"]["vs_cpu_fp32"] == {"same_ids": "4/4", "max_abs_dlogp_same_ids": 0.0}
    for name in ("cpu_fp32", "cuda_fp32"):
        assert out[name]["mismatch"]["tokens"] == 4 * 12
        assert out[name]["mismatch"]["max_abs"] < 1e-5
    # bf16 really is another dtype: its logprobs move off the fp32 ones
    assert out["cuda_bf16"]["mismatch"]["max_abs"] > 1e-5


def test_agreement_counts_only_identical_samples():
    from rlvr.engines.base import Sample
    a = [Sample([1, 2], [-0.5, -0.25], "length"), Sample([3], [-1.0], "length")]
    b = [Sample([1, 2], [-0.5, -0.20], "length"), Sample([4], [-9.0], "length")]
    assert _bench().agreement(a, b) == {"same_ids": "1/2", "max_abs_dlogp_same_ids": pytest.approx(0.05)}
