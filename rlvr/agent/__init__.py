"""The token-exact agent harness (SPEC §3): tools, workspace, transcripts, episodes, the
rollout passport and the concurrent collector.

    tools.py       tool JSON schemas, the one tool-call syntax, `parse_action`
    grammar.py     the grammars of a turn for constrained decoding (`decoding.grammar`)
    hunks.py       applying a unified-diff hunk by content (`edit {"path", "hunk"}`)
    workspace.py   the policy workspace (host temp dir) and its path-safety rules
    executor.py    running a tool call: host-side file tools, `run_tests` in the sandbox
    prompt.py      the system prompt and the user message
    transcript.py  `ChatCodec` (segment tokenization) and `Transcript` (ids/mask/logprobs)
    template_codec.py  `TemplateCodec`: segments rendered by a model's own chat template
    codecs.py      which codec a policy directory speaks through (its chat card, template)
    policy_check.py  `rlvr policy check`: can a model directory be trained as it is
    repetition.py  the n-gram repetition guard
    episode.py     one episode as a state machine
    drive.py       driving one episode with an engine or a teacher (`run_episode`)
    collector.py   G rollouts per task, batched generation, tools in a thread pool
    passport.py    the `trajectories` row, alignment check, `rebuild_check`, `apply_verdict`
    rollout.py     resumable rollouts of many tasks (`roll_out`), the rollout stage's logic

The trajectory reward (SPEC §5) is `rlvr/rl/reward.py`.

Modules are imported explicitly (`from rlvr.agent.episode import ...`). Importing the
package loads one: `grammar`, which registers the tool-call grammars with the engines
(`rlvr.engines.grammars`), so that whatever uses the agent can name them in
`decoding.grammar` (the engines name nothing above them).
"""
from rlvr.agent import grammar  # noqa: F401  (registers the tool-call grammars)
