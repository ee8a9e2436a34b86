"""A structure-aware fuzzer of tensor_codec's decoder: ``python -m tools.fuzz`` (`make fuzz`).

Cases are valid messages (seeds.py) mutated by one to four structure-aware mutators
(mutators.py: metadata keys and values, the header as a JSON tree and as text, the Arrow value),
generated deterministically from (seed, case index), decoded through the public API and touched
(execute.py) in worker processes (worker.py) that a parent watches (runner.py): a crash or hang
is recorded with a JSON reproducer (encoding.py, never pickle) and the run goes on. See
docs/fuzzing.md.

Modules: encoding (plain data <-> JSON), values (Arrow value recipes), jsongen (random JSON,
textual header edits), headers (what the header means: leaf order, canonical layout), seeds,
mutators, execute, worker, runner, __main__ (the command line).
"""
