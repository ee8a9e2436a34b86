"""The benchmarks' smoke tests: every bench script (bench/*.py) run at tiny sizes through its own
code paths, so that a script that no longer runs (an import, a renamed function, a node that
never starts) fails `make test`. They check that each wrote well-formed results (the envelope,
the rows, figures that are finite positive numbers), never how fast anything was. The scripts
that run dora dataflows are marked `dora` (and so `e2e`); those taking seconds, `slow`."""
