"""The fixed system prompt and the user message of an episode.

Both are part of the environment: the system prompt's text (with the tool schemas) goes into
the environment version recorded in every rollout passport, so a changed prompt is a changed
environment. The user message is built from the task's instruction and public test paths
only — nothing of the hidden tests or the reference can reach it.
"""
from __future__ import annotations

import hashlib

from rlvr.tasks.model import Task

# The reasoning of the terse scripted teacher's first call (run_tests); pretraining and the
# copy probe open their synthetic episodes with the same words, so the student sees one form.
TERSE_RUN_TESTS = "Run the tests."

SYSTEM_PROMPT = """\
You fix a bug in a Python repository. Each turn: think briefly, then call exactly one tool:
<tool_call>{"name": "<tool>", "args": {...}}</tool_call>
Tools:
- view {"path": str, "start": int?, "end": int?}: show a file with line numbers, or list a directory
- search {"pattern": str, "path": str?}: lines containing a literal string
- run_tests {"path": str?}: run the public tests (read-only); failures list suspicious file:line
- edit {"path": str, "line": int, "old": str, "new": str}: in line `line`, replace `old` (once in that line) by `new`
- edit {"path": str, "old": str, "new": str}: replace text that occurs exactly once
- edit {"path": str, "hunk": str}: apply one unified-diff hunk
- edit {"suspect": int, "old": str, "new": str}: the same within suspicious line `suspect` (1 = first listed)
- edit {"suspect": int, "fix": str, "nth": int?}: rewrite that line's nth site: fix is a comparison or arithmetic operator, and, or, True, False, +1, -1, not, swap
- submit {}: finish; the source files as they are now are your answer
Hidden tests will check the fix."""


# A model with its own chat template is told about the tools by the template (JSON schemas,
# its call syntax): the system prompt says only what the job is.
TEMPLATE_SYSTEM_PROMPT = """\
You fix a bug in a Python repository using the tools. Each turn: think briefly, then call \
exactly one tool. Start by running the public tests; edit the source (never the tests); \
submit when the public tests pass. Hidden tests will check the fix."""


def system_prompt(templated: bool) -> str:
    """The system prompt: rlvr's own (tools described in prose, its call syntax spelled out)
    or, for a model whose template declares the tools, the job alone."""
    return TEMPLATE_SYSTEM_PROMPT if templated else SYSTEM_PROMPT


def user_message(task: Task) -> str:
    tests = ", ".join(task.public_tests)
    return f"{task.instruction.strip()}\n\nPublic tests: {tests}"


def prompt_fingerprint(templated: bool = False) -> str:
    return hashlib.sha256(system_prompt(templated).encode()).hexdigest()[:12]
