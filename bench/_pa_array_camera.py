"""The baseline camera of bench/camera_fps.py: the same synthetic frames as `tc-camera-source`
(rendered with the same `render`, paced with the same `Pacer`, the same metadata), sent the way
dora's image nodes do today: one flat HWC rgb8 `pa.array` through `node.send_output`.

Settings from the environment: WIDTH, HEIGHT, FPS, FRAMES (as the real camera's).
`sent_ns` is taken just before the frame is turned into the message (HWC copy + `pa.array`),
as the real camera takes it just before `tc.send` (whose one copy is its encode): both latencies
cover all the sending work after the frame exists.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import torch
from dora import Node

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render
from tensor_codec_nodes.common.runtime import Pacer, drain

OUTPUT = "image"


def main() -> int:
    width, height = int(os.environ["WIDTH"]), int(os.environ["HEIGHT"])
    fps, frames = float(os.environ.get("FPS", "60")), int(os.environ.get("FRAMES", "600"))
    node = Node()
    stream = P.new_stream_id()
    device = torch.device("cpu")
    pacer = Pacer(fps)
    index = 0
    while index < frames:
        if any(e["type"] == "STOP" for e in drain(node)):
            break
        if pacer.wait_time() > 0:
            pacer.sleep()
            continue
        capture_ns = P.now_ns()
        frame = render(index % 2**32, height, width, channels=3, device=device)
        metadata = {
            P.SEQ: index,
            P.COUNT: frames,
            P.STREAM: stream,
            P.FRAME: index,
            P.CAPTURE_NS: capture_ns,
            P.ENCODING: "rgb8",
            P.WIDTH: width,
            P.HEIGHT: height,
            P.PATTERN: PATTERN_NAME,
        }
        metadata[P.SENT_NS] = P.now_ns()
        node.send_output(OUTPUT, pa.array(frame.permute(1, 2, 0).contiguous().numpy().ravel()), metadata)
        index += 1
        pacer.sent()
    print(f"pa.array camera: sent {index} frames", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
