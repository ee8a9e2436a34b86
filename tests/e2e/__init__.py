"""Tier 4: end to end, marked `e2e` (conftest.py): real dora dataflows, the dora CLI, the
two-machine runner, installs into fresh environments. `make test` runs them; `make test-fast`
does not."""
