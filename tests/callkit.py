"""Tool calls for tests: one valid call of every form each tool's schema admits, shared by the
parser's tests (tests/test_agent_tools.py) and the grammar's (tests/test_constraint.py), so
that a form the parser accepts and the grammar refuses (or the other way) is caught."""
from __future__ import annotations

VALID_CALLS = [
    ("view", {"path": "mini/core.py"}),
    ("view", {"path": "mini/core.py", "start": 2, "end": 9}),
    ("view", {"path": "."}),
    ("search", {"pattern": "def count"}),
    ("search", {"pattern": "limit", "path": "mini"}),
    ("run_tests", {}),
    ("run_tests", {"path": "tests/test_public.py::test_x"}),
    ("edit", {"path": "a.py", "old": "x < 1", "new": "x <= 1"}),
    ("edit", {"path": "a.py", "old": "pass\n", "new": ""}),
    ("edit", {"path": "a.py", "hunk": "@@ -1,1 +1,1 @@\n-a\n+b\n"}),
    ("edit", {"suspect": 2, "old": "<", "new": "<="}),
    ("submit", {}),
]
