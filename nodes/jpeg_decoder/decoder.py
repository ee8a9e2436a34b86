"""The JPEG decoder's per-message logic, without dora: check each JPEG (header, bounds, size,
crc), decode batches on WORKERS threads, and describe the frames, in input order.

The node's main thread checks and sends; the decoding runs on the workers (each with its own CUDA
stream on a GPU), batches formed as ../common/batching.py says, so receiving, checking, decoding
and sending overlap (issue 34). A frame decoded on a worker's stream is handed to the main thread's
stream GPU-side: that stream waits on an event the worker recorded after the decode, and the frame's
memory is marked as used there (`record_stream`), so the caching allocator gives it to no one else
before the main stream's work on it (the send's copy) is done.

Every bound is checked before an engine sees the JPEG, so what a hostile one costs is the check
(a few milliseconds a megabyte), not the decode: its pixels (MAX_PIXELS), scans (MAX_SCANS),
scans x pixels (MAX_SCAN_PIXELS), marker segments (MAX_SEGMENTS), and the decoded frame's bytes
against what the node's output can carry (`max_frame_bytes`: tc.max_send_bytes; a frame that
could never be sent is memory and time spent for nothing)."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torchvision import tv_tensors

import tensor_codec as tc

from ..common import protocol as P
from ..common.batching import BatchedWork, OrderedBatches
from ..common.device import StreamPerThread
from ..common.hostile import Refusals
from ..common.images import encoding_for
from ..common.jpeg_header import MAX_SCAN_PIXELS, MAX_SCANS, MAX_SEGMENTS, JpegError, check_jpeg_message
from ..common.stats import keep_failure
from .config import INPUT, OUTPUT
from .engines import JpegDecodeEngine

log = logging.getLogger("jpeg-decoder")

_NOT_CARRIED = frozenset(
    {P.CHECKSUM, P.WANTS_ACK, P.EXPECT, P.SENT_NS, *P.IMAGE_KEYS, P.PIXEL_FORMAT, P.CHANNELS, P.JPEG_CRC32}
)


def frame_metadata(source: dict, image: torch.Tensor) -> dict:
    """The decoded frame's metadata: what the JPEG carried, now describing a lossy frame."""
    out = P.carried(source, _NOT_CARRIED)
    channels = image.shape[0]
    # a tensor_codec message: its pixel format under its own key, never dora's image keys
    out.update({P.PIXEL_FORMAT: encoding_for(channels), P.LOSSY: "jpeg"})
    return out


@dataclass
class DecoderStats:
    received: int = 0
    decoded: int = 0
    bad: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"received {self.received}, decoded {self.decoded}, bad {self.bad}"


@dataclass
class _Checked:
    jpeg: torch.Tensor
    channels: int
    metadata: dict
    height: int  # as the JPEG's header says
    width: int


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


class JpegDecoder(BatchedWork):
    """`max_frame_bytes`: the most a decoded frame (channels x height x width bytes) may take,
    what the output can carry (None: unbounded); the other bounds are read_header's. `batch` and
    `workers`: up to how many JPEGs one decode call takes, and how many calls run at once
    (accept -> dispatch -> collect); `check` and `decode` are the same steps on the caller's thread."""

    def __init__(
        self,
        engine: JpegDecodeEngine,
        mode: str = "auto",
        max_pixels: int = 64 * 2**20,
        *,
        max_scans: int = MAX_SCANS,
        max_segments: int = MAX_SEGMENTS,
        max_scan_pixels: int = MAX_SCAN_PIXELS,
        max_frame_bytes: int | None = None,
        refusals: Refusals | None = None,
        batch: int = 1,
        workers: int = 1,
    ):
        self.engine = engine
        self.device = engine.device
        self.mode = mode
        self.max_pixels = max_pixels
        self.bounds = {
            "max_pixels": max_pixels,
            "max_scans": max_scans,
            "max_segments": max_segments,
            "max_scan_pixels": max_scan_pixels,
        }
        self.max_frame_bytes = max_frame_bytes
        self.stats = DecoderStats()
        self.refusals = refusals if refusals is not None else Refusals(log)  # the node's: logged paced, summarised
        self.batches: OrderedBatches[_Checked] = OrderedBatches(self._submit, batch, workers)
        self._pool: ThreadPoolExecutor | None = None  # made on the first batch
        self._stream = StreamPerThread(self.device) if self.device.type == "cuda" else None  # each worker's own

    def limits(self) -> str:
        """What this decoder refuses before decoding, for the log at start: the frame bound as the
        pixels it leaves in RGB and grey (the smaller of it and MAX_PIXELS: what really applies)."""
        parts = [f"MAX_PIXELS={self.max_pixels}"]
        if self.max_frame_bytes is not None:
            rgb = min(self.max_pixels, self.max_frame_bytes // 3)
            grey = min(self.max_pixels, self.max_frame_bytes)
            parts.append(
                f"frames up to {_mib(self.max_frame_bytes)} (what output `{OUTPUT}` can carry): at most {rgb} px "
                f"in RGB, {grey} px grey"
            )
        parts += [f"{name.upper()}={value}" for name, value in self.bounds.items() if name != "max_pixels"]
        return "limits: " + ", ".join(parts)

    def check(self, event: dict) -> _Checked | None:
        """One JPEG message, checked before decoding; a bad one is logged, counted, None."""
        self.stats.received += 1
        metadata = event.get("metadata") or {}
        try:
            # A copy the decoder owns, taken before the check (the sender's memory may change after
            # it): the message's buffer goes back to dora at once. numpy's copy is one memcpy;
            # torch's splits a megabyte over its threads and waited ~12 ms for a busy core.
            jpeg = torch.from_numpy(tc.plain_bytes(event.get("value")).numpy().copy())
            info = check_jpeg_message(jpeg, metadata, **self.bounds)
            channels = self._channels(metadata, info.components)
            self._check_frame_bytes(channels, info.height, info.width)
        except (JpegError, tc.CodecError) as e:
            self._bad(metadata, f"{type(e).__name__}: {e}")
            return None
        return _Checked(jpeg, channels, metadata, info.height, info.width)

    def _check_frame_bytes(self, channels: int, height: int, width: int) -> None:
        """Refuse a frame the output could never carry, before memory is taken for it: its bytes as
        a codec message's payload holds them (padded to 64)."""
        nbytes = -(-channels * height * width // 64) * 64
        if self.max_frame_bytes is not None and nbytes > self.max_frame_bytes:
            raise JpegError(
                f"decoded frame {width}x{height}x{channels} = {_mib(nbytes)}, expected at most "
                f"{_mib(self.max_frame_bytes)}: what output `{OUTPUT}` can carry (tc.max_send_bytes, from dora's "
                "routes; where this node's shared_memory_pool_size is what limits it, a larger one in the dataflow "
                "YAML raises it)"
            )

    def _channels(self, metadata: dict, components: int) -> int:
        if self.mode == "rgb":
            return 3
        if self.mode == "gray":
            return 1
        said = metadata.get(P.CHANNELS)
        if said is None:
            return 1 if components == 1 else 3
        # `type(...) is int`: True == 1 in Python, and a colour JPEG decoded to grey is a silent loss.
        if type(said) is not int or said not in (1, 3):
            raise JpegError(f"metadata.{P.CHANNELS}: expected 1 or 3 (or absent), got {said!r}")
        return said

    # -- on the caller's thread -------------------------------------------------------------

    def decode(self, batch: list[_Checked]) -> list[tuple[tv_tensors.Image, dict]]:
        """Decode a batch now, on the caller's current stream; -> (frame, metadata) for each JPEG
        that decoded, in order."""
        return self._frames(batch, self.engine.decode([c.jpeg for c in batch], [c.channels for c in batch]), None)

    # -- on the workers ----------------------------------------------------------------------

    def accept(self, event: dict) -> bool:
        """Check one JPEG message and queue it for decoding; a bad one is logged, counted, False."""
        checked = self.check(event)
        if checked is None:
            return False
        self.batches.add(checked)
        return True

    def collect(self, timeout: float = 0.0) -> list[tuple[tv_tensors.Image, dict]]:
        """Decoded frames in input order, ready on the caller's current stream; waits up to
        `timeout` seconds for the oldest batch if nothing is finished."""
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        out = []
        for job in self.batches.done(timeout):
            try:
                results, decoded = job.future.result()
            except Exception as e:  # the engine's decode catches per JPEG: this is the worker failing
                for item in job.items:
                    self._bad(item.metadata, f"decode: {type(e).__name__}: {e}")
                continue
            if decoded is not None:
                stream.wait_event(decoded)  # GPU-side: the frames are made before this stream reads them
            out += self._frames(job.items, results, stream)
        return out

    def _submit(self, items: list[_Checked]) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.batches.workers, thread_name_prefix=f"jpeg-decode-{self.engine.name}")
        return self._pool.submit(self._decode_on_worker, items)

    def _decode_on_worker(self, items: list[_Checked]):
        """-> (the engine's results, an event after them on the worker's stream, None on the CPU)."""
        jpegs, channels = [c.jpeg for c in items], [c.channels for c in items]
        if self.device.type != "cuda":
            return self.engine.decode(jpegs, channels), None
        stream = self._stream()
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            results = self.engine.decode(jpegs, channels)
            decoded = torch.cuda.Event()
            decoded.record(stream)
        return results, decoded

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- both ----------------------------------------------------------------------------------

    def _frames(self, batch: list[_Checked], results: list, stream) -> list[tuple[tv_tensors.Image, dict]]:
        """Each result checked against its JPEG's header; `stream`: the one the frames are used on
        from now (their memory marked as used there), None when they were made on it."""
        out = []
        for item, result in zip(batch, results):
            if isinstance(result, Exception):
                self._bad(
                    item.metadata,
                    f"decode: {type(result).__name__}: {str(result).splitlines()[0] if str(result) else ''}",
                )
                continue
            # The header's size, or its sides swapped (an EXIF orientation that rotates by 90
            # degrees, applied by every engine); anything else is not this JPEG's frame.
            want = (item.channels, item.height, item.width)
            if tuple(result.shape) not in (want, (item.channels, item.width, item.height)):
                self._bad(
                    item.metadata,
                    f"decode: {self.engine.name} returned shape {tuple(result.shape)}, expected {want} from the "
                    "JPEG's header",
                )
                continue
            if stream is not None:
                result.record_stream(stream)
            self.stats.decoded += 1
            out.append((tv_tensors.Image(result), frame_metadata(item.metadata, result)))
        return out

    def send_failed(self, metadata: dict, error: Exception) -> None:
        self.stats.decoded -= 1
        self._bad(metadata, f"send: {type(error).__name__}: {error}")

    def _bad(self, metadata: dict, reason: str) -> None:
        self.stats.bad += 1
        what = f"frame {P.label(metadata)}: {reason}"
        keep_failure(self.stats.failures, what)
        self.refusals.refuse(f"{INPUT}: bad JPEG", what)
