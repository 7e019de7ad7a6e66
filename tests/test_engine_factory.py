"""The engine factories: `rlvr.engines.build_engine` builds the token engines (torch, vllm);
`rlvr.teachers.acting.build_acting_engine` any acting kind (those and the teachers: openai,
scripted). Each option error is named as its params.yaml field."""
from __future__ import annotations

import pytest

from agentkit import tiny_policy_dir
from rlvr.engines import TOKEN_ENGINES, build_engine
from rlvr.errors import ConfigError
from rlvr.teachers.acting import KINDS, TEACHERS, build_acting_engine


def test_every_kind_is_registered_once():
    assert set(KINDS) == {"torch", "vllm", "openai", "scripted"}
    assert set(TOKEN_ENGINES) & set(TEACHERS) == set()


def test_torch():
    from rlvr.engines.model_dir import weights_fingerprint
    from rlvr.engines.torch_engine import TorchEngine

    policy = tiny_policy_dir()
    eng = build_engine("torch", policy, options={"share_prefix": False})
    assert isinstance(eng, TorchEngine) and not eng.share_prefix
    assert eng.policy_version == weights_fingerprint(policy)
    assert build_engine("torch", policy, policy_version="step-3").policy_version == "step-3"
    with pytest.raises(ConfigError, match=r"evaluate\.engine_options\.devcie: unknown key"):
        build_engine("torch", policy, options={"devcie": "cpu"}, where="evaluate")


def test_token_kinds_act_through_the_acting_factory_as_built_below_it():
    from rlvr.engines.torch_engine import TorchEngine

    policy = tiny_policy_dir()
    eng = build_acting_engine("torch", policy, policy_version="w", policy_step=2,
                              options={"share_prefix": False}, teacher={"noise": 0.5},
                              max_turns=3)
    assert isinstance(eng, TorchEngine) and not eng.share_prefix
    assert (eng.policy_version, eng.policy_step) == ("w", 2)
    with pytest.raises(ConfigError, match=r"evaluate\.engine_options\.devcie: unknown key"):
        build_acting_engine("torch", policy, options={"devcie": "cpu"}, where="evaluate")


def test_policy_step_is_the_callers_argument_not_a_backend_option(tmp_path):
    """An ordinal, like policy_version, says which policy the caller means: an argument of
    the factory for every token engine; never in engine_options; a teacher's is 0."""
    policy = tiny_policy_dir()
    assert build_engine("torch", policy).policy_step == 0
    assert build_engine("torch", policy, policy_version="w", policy_step=3).policy_step == 3
    with pytest.raises(ConfigError, match=r"rollout\.engine_options\.policy_step: unknown key"):
        build_engine("torch", policy, options={"policy_step": 3})
    for build in (build_engine, build_acting_engine):
        with pytest.raises(ConfigError, match=r"evaluate\.policy_step: .*>= 0"):
            build("torch", policy, policy_step=-1, where="evaluate")
    with pytest.raises(ConfigError, match=r"evaluate\.policy_step: .*>= 0"):
        build_acting_engine("scripted", policy, policy_step=-1, where="evaluate")
    eng = build_engine("vllm", tmp_path, policy_version="p1", policy_step=2,
                       options={"base_url": "http://127.0.0.1:9/", "served_model_name": "m"})
    try:
        assert (eng.policy_version, eng.policy_step) == ("p1", 2)
    finally:
        eng.close()
    for kind, options in (("scripted", None), ("openai", {"model": "m", "api_key_env": ""})):
        with pytest.raises(ConfigError, match=r"rollout\.policy_step: a teacher"):
            build_acting_engine(kind, tmp_path, policy_step=1, options=options)


def test_vllm_attaches_to_a_running_server_without_launching_one(tmp_path):
    from rlvr.engines.vllm_engine import VllmEngine

    # attaching builds a client only (no request is sent), so no server is needed here
    eng = build_engine("vllm", tmp_path, policy_version="p1",
                       options={"base_url": "http://127.0.0.1:9/", "served_model_name": "m"})
    try:
        assert isinstance(eng, VllmEngine) and eng.server is None
        assert (eng.policy_version, eng.model, eng.base_url) == ("p1", "m", "http://127.0.0.1:9")
    finally:
        eng.close()
    with pytest.raises(ConfigError, match=r"rollout\.engine_options\.base_ur"):
        build_engine("vllm", tmp_path, options={"base_ur": "http://x"})


def test_openai(tmp_path):
    from rlvr.teachers.openai import OpenAIEngine

    eng = build_acting_engine("openai", tmp_path, options={"model": "m", "api_key_env": ""})
    assert isinstance(eng, OpenAIEngine) and eng.policy_version == "openai:m"
    eng = build_acting_engine("openai", tmp_path, policy_version="teacher-a",
                              options={"model": "m", "api_key_env": ""})
    assert eng.policy_version == "teacher-a"
    with pytest.raises(ConfigError, match=r"rollout\.engine_options\.modle"):
        build_acting_engine("openai", tmp_path, options={"modle": "m"})


def test_scripted(tmp_path):
    from rlvr.teachers.scripted import ScriptedTeacher

    eng = build_acting_engine("scripted", tmp_path, teacher={"noise": 0.25, "hints": True},
                              max_turns=7)
    assert isinstance(eng, ScriptedTeacher)
    assert (eng.noise, eng.max_turns, eng.hints) == (0.25, 7, True)
    assert "noise0.25" in eng.policy_version
    with pytest.raises(ConfigError, match="the scripted teacher takes none"):
        build_acting_engine("scripted", tmp_path, options={"temperature": 1.0})


def test_unknown_kind_names_the_field_and_the_known_kinds(tmp_path):
    with pytest.raises(ConfigError) as exc:
        build_acting_engine("gpt", tmp_path)
    assert str(exc.value) == ("rollout.engine: engine kind 'gpt' unknown "
                              "(known: openai, scripted, torch, vllm)")
    # the token factory knows only its own kinds: a teacher is built a floor above it
    with pytest.raises(ConfigError) as exc:
        build_engine("scripted", tmp_path, where="grpo")
    assert str(exc.value) == ("grpo.engine: engine kind 'scripted' unknown "
                              "(known: torch, vllm)")
