"""Developer tools of the project: the installer (install_env.py, run as a script by `make
install`), `make gpu-check` (``python -m tools.gpu_check``) and the local cluster of `make
run-cluster` (``python -m tools.local_cluster``). Run from the repository's root: they are not
installed with the package."""
