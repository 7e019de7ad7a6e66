"""Teachers: solvers that write demonstrations for rejection-sampling SFT (SPEC §6).

A teacher is not the policy. It speaks the policy's tool-call syntax, but its text is
tokenized by the harness as a segment (fine for imitation, never for RL, whose ratio needs
the policy's own sampled ids and behaviour log-probabilities). Two kinds:

* `scripted` — a systematic debugger bound to one episode (`ScriptedTeacher.for_task`);
* `openai` — any OpenAI-compatible chat endpoint (`OpenAIEngine`).

`acting` builds any acting engine by kind, these and the token engines alike: the one
dispatch over both sits on this floor, above the agent that runs them.
"""
