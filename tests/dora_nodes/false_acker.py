"""Test node: a consumer that stays alive but acknowledges wrongly, as the retest of 2026-12-07
found tensor senders wedged by (issue 60). It takes every message of every input, and:

    MODE=stop_after:N   acknowledges the first N distinct messages it takes (echoing each copy's
                        tx, as tc-tensor-receiver does, and each later copy of them again, so an
                        ack dora lost is made good by the resend), then no other: alive and
                        silent. Which N they are is dora's order of delivery: on a loaded host a
                        message can reach it only after N others (its copies dropped or held),
                        so it names the seqs it acknowledged at the end for a test to compare
    MODE=tx:T           acknowledges every copy it takes, echoing tx T instead of the copy's

It ends when its event stream ends (every producer gone)."""

import os
import sys

import pyarrow as pa
from dora import Node

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.delivery import ack_for

EMPTY = pa.array([], type=pa.uint8())


def main() -> int:
    kind, _, value = os.environ["MODE"].partition(":")
    number = int(value)
    node = Node()
    taken: set = set()
    acked: set = set()  # stop_after: the messages it acknowledges (and every copy of them)
    acknowledged = 0
    for event in node:
        if event["type"] != "INPUT":
            continue
        ack = ack_for(event["metadata"] or {})
        if ack is None:
            continue
        key = (ack[P.STREAM], ack[P.SEQ])
        taken.add(key)
        if kind == "tx":
            ack[P.TX] = number
        elif key in acked or len(acked) < number:
            acked.add(key)
        else:
            continue
        node.send_output("ack", EMPTY, ack)
        acknowledged += 1
    seqs = ",".join(str(seq) for seq in sorted(seq for _, seq in acked))
    print(
        f"false acker ({kind}:{number}): took {len(taken)} messages, sent {acknowledged} acks,",
        f"acknowledged seqs [{seqs}]",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
