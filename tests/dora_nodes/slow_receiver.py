"""Test node: the project's tensor receiver (tc-tensor-receiver, unchanged: same settings,
verification, acks and report), made slow and, optionally, mortal.

    SLOW_MS=50      sleep this long before handling each input message (a slow consumer)
    DIE_AFTER=N     after handling N messages, exit at once with status 3 (os._exit: no summary,
                    no report, nothing flushed by dora), as a crashed or killed receiver would
"""

import os
import sys
import time

from tensor_codec_nodes.tensor_receiver import main as receiver_main
from tensor_codec_nodes.tensor_receiver.receiver import Receiver

SLOW_S = float(os.environ.get("SLOW_MS", "0")) / 1000
DIE_AFTER = int(os.environ.get("DIE_AFTER", "0"))

_handle = Receiver.handle
_handled = 0


def slow_handle(self, event):
    global _handled
    if DIE_AFTER and _handled >= DIE_AFTER:
        print(f"slow receiver: dying after {_handled} messages", file=sys.stderr, flush=True)
        os._exit(3)
    if SLOW_S:
        time.sleep(SLOW_S)
    _handled += 1
    return _handle(self, event)


Receiver.handle = slow_handle
sys.exit(receiver_main.main())
