"""Attacks from a second thread of the code under test (runner.py, "Threads").

CPython runs one thread at a time but may switch between any two bytecodes, so a thread of
the code under test can act while the main thread is inside a trusted step - including the
audit hook's own reads, whose events the hook ignores for the thread doing them.
"""
from __future__ import annotations

from adversarial.cases import Case, core_with, src

# A wrong clamp, plus a thread that asks for every thread's real frames until it is answered
# while the main thread sits inside the hook (the main thread calls sys._getframe in a loop,
# so most of its time is spent there). With a real frame of the hook it signs "passed" for
# every planned test and "done", then silences the hook's own records.
HOOK_WINDOW_RACE = core_with(prefix='''\
import sys
import threading

_STATE = {"started": False, "done": False, "main": None}


def _thief():
    for _ in range(100000):
        if _STATE["done"]:
            return
        try:
            frames = sys._current_frames()
        except Exception:
            continue
        f = frames.get(_STATE["main"])
        while f is not None:
            loc = f.f_locals
            if "emit" in loc and "S" in loc and loc["S"].get("plan"):
                state, emit = loc["S"], loc["emit"]
                for pos, entry in enumerate(state["plan"]):
                    emit("item", str(pos), "passed", entry[0].encode().hex(), "")
                emit("done", "1")
                state["fd"] = -1
                _STATE["done"] = True
                return
            f = f.f_back


def _race():
    if _STATE["started"]:
        return
    _STATE["started"] = True
    _STATE["main"] = threading.get_ident()
    sys.setswitchinterval(1e-6)
    threading.Thread(target=_thief, daemon=True).start()
    for _ in range(5000):
        if _STATE["done"]:
            break
        sys._getframe()
''', body='''\
def clamp(x, lo, hi):
    _race()
    return lo if x > hi else max(lo, x)
''')

# The same theft through another of the hook's windows: the main thread reads `tb_frame` in
# a loop (refused, unflagged by the verdict), and the hook looks up who is asking with its
# own frame read - the thread is answered if it asks in that moment.
FRAME1_WINDOW_RACE = HOOK_WINDOW_RACE.replace('''    for _ in range(5000):
        if _STATE["done"]:
            break
        sys._getframe()
''', '''    try:
        raise ValueError
    except ValueError as exc:
        tb = exc.__traceback__
    for _ in range(200000):
        if _STATE["done"]:
            break
        try:
            tb.tb_frame
        except AttributeError:
            pass
''')
assert FRAME1_WINDOW_RACE != HOOK_WINDOW_RACE

THREAD_CASES = [
    Case("thread_race_hook_window", "tests_failed", src(HOOK_WINDOW_RACE), flags=("blocked_introspection",),
         about="a thread answered while the main thread is inside the hook's own reads steals the key"),
    Case("thread_race_frame1_window", "tests_failed", src(FRAME1_WINDOW_RACE), flags=("blocked_introspection",),
         about="the same theft through the hook's who-is-asking frame read"),
]
