"""Reusable dora nodes built on tensor_codec (installed as the `tensor_codec_nodes` package).

Each node is a sub-package with a thin `main()` (its console script), a pure `load_config(env)`
and a per-event handler that is tested without a daemon, plus a `dora-node.yml` manifest:

- `camera_source`: frames as `tv_tensors.Image` (synthetic test pattern, V4L2/USB camera, video
  file or image folder), console script `tc-camera-source`;
- `tensor_sender`: a verification suite, random load or a `.safetensors` file, `tc-tensor-sender`;
- `tensor_receiver`: restores, verifies and reports, `tc-tensor-receiver`.
"""

import os as _os

# Idle OpenMP workers of torch spin-wait by default. A dora pipeline runs several such processes
# side by side, and the spinning of one steals the cores the others need: measured on 2 cores,
# a 1080p camera at 60 fps missed deadlines and its receiver burnt ~6 ms of CPU per frame just
# spinning (bench/README.md). Passive waiting keeps the thread pool for big copies without that.
# Only a default (an explicit setting wins), and it only works before torch is imported, which is
# why it lives here: the console scripts import this package first.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
