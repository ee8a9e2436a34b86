"""Node-level fuzzing (`make fuzz-nodes`, `python -m tools.fuzz --nodes`; docs/fuzzing.md):
hostile messages and acks into the project's nodes through real dora dataflows, while real
traffic runs through them, and each node's counts held to what was sent.

- schedule.py: the categories of hostile input per target, the bucket each must be counted in,
  and a seeded plan of them between the real messages (no torch, no dora);
- forge.py: the hostile messages themselves; node.py: the hostile dora node that sends them and
  records what it sent;
- flows.py: a dataflow per target; dora_run.py: `dora run` under a time limit, the nodes' logs;
- counts.py: what the nodes said they counted; checks.py: sent against counted, and the rest;
- runner.py: the campaign; table.py: its tables; __main__.py: the command line.
"""
