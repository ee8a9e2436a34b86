"""Developer tools of the project: the installer (install_env.py, run as a script by `make
install`) and `make gpu-check` (``python -m tools.gpu_check``)."""
