"""Host-side reading of what `run_tests` showed the agent: its *suspicious lines* section.

The sandbox plugin (`_sandbox/rlvr_locate.py`) writes one line per suspect,
`path:line: text  [f failing, p passing]`, under a header; the teacher, the pretraining copy
probe and the diagnostics all read it back through this one parser, so a format change is
made in two places (writer, reader) and nowhere else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = "suspicious lines"
_LINE = re.compile(r"^([\w./-]+\.py):(\d+): (.*?)  \[(\d+) failing, (\d+) passing\]$", re.M)


@dataclass(frozen=True)
class SuspiciousLine:
    path: str
    line: int
    text: str      # the source line as shown (stripped)
    failing: int   # failing public tests that ran it
    passing: int   # passing public tests that ran it


def suspicious_lines(output: str) -> list[SuspiciousLine]:
    """The suspects of one run_tests output, most suspicious first ([] when none listed)."""
    if HEADER not in output:
        return []
    section = output.split(HEADER, 1)[1]
    return [SuspiciousLine(m.group(1), int(m.group(2)), m.group(3), int(m.group(4)),
                           int(m.group(5))) for m in _LINE.finditer(section)]
