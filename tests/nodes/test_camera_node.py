"""Camera source without a daemon: frame messages, the real sources, pacing."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from torchvision import tv_tensors

from tensor_codec.dora import Link
from tensor_codec_nodes.camera_source import sources
from tensor_codec_nodes.camera_source.camera import Camera
from tensor_codec_nodes.camera_source.config import load_config
from tensor_codec_nodes.camera_source.sources import OpenCVSource, SourceError, SyntheticSource, open_source
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, read_index, render
from tensor_codec_nodes.common.runtime import Pacer
from tests.support.fakes import FakeNode
from tests.support.jpeg import reference_encode
from tests.support.optional import import_or_skip

CPU = torch.device("cpu")


def synthetic_camera(**overrides) -> Camera:
    env = {"WIDTH": "160", "HEIGHT": "120", "FRAMES": "3", **{k.upper(): str(v) for k, v in overrides.items()}}
    config = load_config(env)
    return Camera(
        config,
        SyntheticSource(config.width, config.height, config.channels, CPU, hwc=config.format == "raw"),
        stream="s1",
    )


def test_codec_frames_are_images_that_name_their_pixel_format_but_carry_no_dora_image_keys():
    camera = synthetic_camera()
    frames = []
    while (message := camera.next_frame()) is not None:
        frames.append(message)
    assert len(frames) == 3 and camera.finished
    for i, (image, metadata) in enumerate(frames):
        assert type(image) is tv_tensors.Image and image.dtype == torch.uint8 and image.shape == (3, 120, 160)
        assert torch.equal(image.as_subclass(torch.Tensor), render(i, 120, 160))
        # dora's image keys would tell hub nodes the value is flat interleaved bytes: it is not
        assert metadata[P.PIXEL_FORMAT] == "rgb8" and not P.IMAGE_KEYS & metadata.keys()
        assert metadata[P.PATTERN_SIZE] == "160x120"
        assert (metadata[P.FRAME], metadata[P.SEQ], metadata[P.COUNT], metadata[P.STREAM]) == (i, i, 3, "s1")
        assert metadata[P.PATTERN] == PATTERN_NAME and isinstance(metadata[P.CAPTURE_NS], int)


def test_interleaved_layout_keeps_pixels_and_travels_with_its_strides():
    import tensor_codec as tc

    config = load_config({"WIDTH": "320", "HEIGHT": "240", "LAYOUT": "interleaved"})
    frame, _ = Camera(config, open_source(config, CPU), stream="s1").next_frame()
    assert frame.shape == (3, 240, 320) and frame.permute(1, 2, 0).is_contiguous()
    assert torch.equal(frame, render(0, 240, 320))
    back = tc.decode(*tc.encode(frame))
    assert isinstance(back, tv_tensors.Image) and back.stride() == frame.stride() and torch.equal(back, frame)


def test_raw_frames_are_hwc_views_and_mono_is_mono8():
    hwc, metadata = synthetic_camera(format="raw").next_frame()
    assert hwc.shape == (120, 160, 3) and type(hwc) is torch.Tensor
    assert hwc.is_contiguous()  # rendered interleaved: sending it is one plain copy
    assert (metadata[P.ENCODING], metadata[P.WIDTH], metadata[P.HEIGHT]) == (
        "rgb8",
        160,
        120,
    ) and P.PIXEL_FORMAT not in metadata
    mono, metadata = synthetic_camera(channels=1, format="raw").next_frame()
    assert mono.shape == (120, 160, 1) and metadata[P.ENCODING] == "mono8"
    mono, metadata = synthetic_camera(channels=1).next_frame()
    assert mono.shape == (1, 120, 160) and metadata[P.PIXEL_FORMAT] == "mono8"


def test_endless_camera_never_finishes():
    camera = synthetic_camera(frames=0)
    for _ in range(5):
        assert camera.next_frame() is not None
    assert not camera.finished


def write_png(image: torch.Tensor, path) -> None:
    """A PNG written by TorchCodec, the tests' reference writer (the test skips without it)."""
    import_or_skip("torchcodec.encoders").PngEncoder(image).to_file(path)


def write_images(folder, count, size=(3, 48, 64)):
    folder.mkdir()
    for i in range(count):
        write_png(torch.full(size, 40 * i, dtype=torch.uint8), folder / f"img_{i:02d}.png")
    (folder / "notes.txt").write_text("not an image")


def test_image_folder_in_name_order_resized_and_looped(tmp_path):
    write_images(tmp_path / "imgs", 3)
    config = load_config(
        {"SOURCE": "images", "SOURCE_PATH": str(tmp_path / "imgs"), "WIDTH": "32", "HEIGHT": "24", "LOOP": "1"}
    )
    source = open_source(config, CPU)
    frames = [source.read(i) for i in range(4)]
    assert all(f.shape == (3, 24, 32) and f.dtype == torch.uint8 for f in frames)
    assert [int(f[0, 0, 0]) for f in frames] == [0, 40, 80, 0]


def test_image_folder_native_size_ends_without_loop(tmp_path):
    write_images(tmp_path / "imgs", 2)
    config = load_config({"SOURCE": "images", "SOURCE_PATH": str(tmp_path / "imgs"), "WIDTH": "0", "HEIGHT": "0"})
    camera = Camera(config, open_source(config, CPU))
    messages = [camera.next_frame() for _ in range(3)]
    assert messages[0][0].shape == (3, 48, 64) and messages[2] is None
    assert P.PATTERN not in messages[0][1]


def test_missing_sources_are_clear_errors(tmp_path):
    with pytest.raises(
        SourceError, match="SOURCE_PATH: expected a folder of images, got '.*nowhere' \\(not a folder\\)"
    ):
        open_source(load_config({"SOURCE": "images", "SOURCE_PATH": str(tmp_path / "nowhere")}), CPU)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="expected .jpg, .jpeg, .png files in"):
        open_source(load_config({"SOURCE": "images", "SOURCE_PATH": str(tmp_path / "empty")}), CPU)
    with pytest.raises(SourceError, match="SOURCE_PATH: expected a video file, got '.*clip.avi' \\(not found\\)"):
        open_source(load_config({"SOURCE": "video", "SOURCE_PATH": str(tmp_path / "clip.avi")}), CPU)


def test_video_file_through_opencv(tmp_path):
    cv2 = pytest.importorskip("cv2")
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for i in range(5):
        bgr = np.zeros((48, 64, 3), dtype=np.uint8)
        bgr[..., 2] = 200  # red in BGR order
        bgr[..., 0] = 20 * i
        writer.write(bgr)
    writer.release()
    config = load_config({"SOURCE": "video", "SOURCE_PATH": str(path), "WIDTH": "0", "HEIGHT": "0"})
    source = open_source(config, CPU)
    assert isinstance(source, OpenCVSource)
    frames = []
    while (frame := source.read(len(frames))) is not None:
        frames.append(frame)
    source.close()
    assert len(frames) == 5
    first = frames[0]
    assert first.shape == (3, 48, 64) and first.is_contiguous()
    assert abs(int(first[0].float().mean()) - 200) < 10  # red channel first: BGR became RGB
    assert abs(int(frames[4][2].float().mean()) - 80) < 10


def test_the_start_line_says_what_the_source_is_its_size_and_length(tmp_path):
    """A 640x480, 30-frame clip was announced as `video 0x0 ... endless frames` (the settings'
    WIDTH/HEIGHT=0 and FRAMES=0, not what they mean)."""
    from tensor_codec_nodes.camera_source.node import CameraSource

    cv2 = pytest.importorskip("cv2")
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (640, 480))
    for _ in range(30):
        writer.write(np.zeros((480, 640, 3), dtype=np.uint8))
    writer.release()

    def line(env):
        config = load_config(env)
        source = open_source(config, CPU)
        try:
            return f"{source.describe()}, {CameraSource.length(types.SimpleNamespace(config=config))}"
        finally:
            source.close()

    native = {"SOURCE": "video", "SOURCE_PATH": str(path), "WIDTH": "0", "HEIGHT": "0"}
    assert line(native) == "video clip.avi, 640x480, 30 frames, sends every frame of the video"
    assert (
        line({**native, "LOOP": "1"})
        == "video clip.avi, 640x480, 30 frames (looped), sends frames until stopped (FRAMES=0)"
    )
    assert (
        line({**native, "WIDTH": "320", "HEIGHT": "240", "FRAMES": "10"})
        == "video clip.avi, 320x240, 30 frames, sends 10 frames"
    )
    assert line({}) == "synthetic 640x480, sends frames until stopped (FRAMES=0)"
    (tmp_path / "pics").mkdir()
    cv2.imwrite(str(tmp_path / "pics" / "a.png"), np.zeros((4, 4, 3), dtype=np.uint8))
    images = {"SOURCE": "images", "SOURCE_PATH": str(tmp_path / "pics"), "WIDTH": "0", "HEIGHT": "0"}
    assert line(images) == "images in pics, 1 file, each at its own size, sends every frame of the folder"


def test_pacer_keeps_the_rate_without_drift_or_bursts():
    now = [0.0]
    pacer = Pacer(10, clock=lambda: now[0])
    assert pacer.wait_time() == 0
    pacer.sent()
    assert pacer.wait_time() == pytest.approx(0.1)
    now[0] = 0.1
    pacer.sent()  # on time: the next deadline is 0.2, not 0.2 + lateness
    now[0] = 0.15
    assert pacer.wait_time() == pytest.approx(0.05)
    now[0] = 1.0  # a long stall: restart from now instead of bursting
    pacer.sent()
    assert pacer.wait_time() == pytest.approx(0.1)
    assert Pacer(0).wait_time() == 0


def test_synthetic_index_wraps_past_32_bits():
    source = SyntheticSource(160, 120, 3, CPU)
    assert read_index(source.read(2**32 + 7)) == 7


def images_source(folder, **env):
    return open_source(
        load_config({"SOURCE": "images", "SOURCE_PATH": str(folder), "WIDTH": "0", "HEIGHT": "0", **env}), CPU
    )


def test_an_undecodable_image_is_skipped_and_counted(tmp_path, caplog):
    write_images(tmp_path / "imgs", 2)
    (tmp_path / "imgs" / "img_00b.png").write_bytes(b"\x89PNG broken")
    source = images_source(tmp_path / "imgs")
    with caplog.at_level("WARNING", logger="camera-source"):
        frames = [source.read(i) for i in range(3)]
    assert [int(f[0, 0, 0]) for f in frames[:2]] == [0, 40] and frames[2] is None
    assert source.skipped == 1
    assert f"skipped {tmp_path / 'imgs' / 'img_00b.png'}: not a decodable image (" in caplog.text

    looping = images_source(tmp_path / "imgs", LOOP="1")
    assert [int(looping.read(i)[0, 0, 0]) for i in range(6)] == [0, 40] * 3 and looping.skipped == 1


def test_unreadable_empty_damaged_and_animated_files_are_skipped_each_named(tmp_path, caplog):
    folder = tmp_path / "imgs"
    write_images(folder, 1)
    (folder / "a_folder.png").mkdir()  # matches the suffix, cannot be read
    (folder / "b_empty.jpg").write_bytes(b"")
    jpeg = reference_encode(torch.full((3, 48, 64), 90, dtype=torch.uint8), quality=90).numpy().tobytes()
    (folder / "c_truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (folder / "d_text.jpeg").write_bytes(b"hello, not an image")
    image = pytest.importorskip("PIL.Image")
    frames = [image.new("RGB", (64, 48), (v, v, v)) for v in (10, 20)]
    frames[0].save(folder / "e_animated.png", format="GIF", save_all=True, append_images=frames[1:])  # a GIF named .png
    source = images_source(folder)
    with caplog.at_level("WARNING", logger="camera-source"):
        assert source.read(0).shape == (3, 48, 64) and source.read(1) is None
    assert source.skipped == 5
    reasons = {
        "a_folder.png": "Is a directory",
        "b_empty.jpg": "the file is empty",
        "c_truncated.jpg": "truncated",
        "d_text.jpeg": "nrecognized image format",
        "e_animated.png": "expected a still image, got 2 frames",
    }
    for name, reason in reasons.items():
        line = next(
            r.getMessage()
            for r in caplog.records
            if f"skipped {folder / name}: not a decodable image" in r.getMessage()
        )
        assert reason in line, line


def test_sixteen_bit_images_become_rgb8(tmp_path):
    cv2 = pytest.importorskip("cv2")  # writes 16-bit PNGs (TorchCodec's PngEncoder takes uint8 only)
    (tmp_path / "imgs").mkdir()
    deep = np.full((24, 32, 3), 200 * 257, dtype=np.uint16)
    deep[0, 0] = 0x12F0  # rgb8 takes the high byte, as torchvision's to_dtype(scale=True) does
    assert cv2.imwrite(str(tmp_path / "imgs" / "a.png"), deep)
    from torchvision.transforms.v2 import functional as F

    from tensor_codec_nodes.camera_source.sources import _fit

    wide = F.to_dtype(torch.full((3, 24, 32), 200, dtype=torch.uint8), torch.uint16, scale=True)
    assert _fit(wide, 0, 0).dtype == torch.uint8 and int(_fit(wide, 0, 0)[0, 0, 0]) == 200
    frame = images_source(tmp_path / "imgs").read(0)
    assert frame.dtype == torch.uint8 and frame.shape == (3, 24, 32)
    assert int(frame[0, 1, 1]) == 200 and frame[:, 0, 0].tolist() == [0x12] * 3


def jpeg_with_exif_orientation(image: torch.Tensor, orientation: int) -> bytes:
    """A JPEG of image whose EXIF says how to turn it upright (6: rotate 90 degrees clockwise)."""
    tiff = (
        b"MM\x00\x2a\x00\x00\x00\x08"
        + b"\x00\x01"
        + b"\x01\x12\x00\x03\x00\x00\x00\x01"
        + orientation.to_bytes(2, "big")
        + b"\x00\x00"
        + b"\x00" * 4
    )
    app1 = b"Exif\x00\x00" + tiff
    jpeg = reference_encode(image, quality=95).numpy().tobytes()
    return jpeg[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + jpeg[2:]


def exif_folder(tmp_path):
    """Two JPEGs of a picture whose left half is dark and right half light: one plain, one
    stored as is but tagged 'rotate 90 degrees clockwise to view' (EXIF orientation 6); and a
    16-bit PNG."""
    picture = torch.zeros(3, 48, 64, dtype=torch.uint8)
    picture[:, :, 32:] = 220
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "a_plain.jpg").write_bytes(jpeg_with_exif_orientation(picture, 1))
    (folder / "b_rotated.jpg").write_bytes(jpeg_with_exif_orientation(picture, 6))
    write_png(picture, folder / "c.png")
    return folder


def test_images_are_turned_upright_by_their_exif_orientation(tmp_path):
    source = images_source(exif_folder(tmp_path))
    plain, rotated = source.read(0), source.read(1)
    assert plain.shape == (3, 48, 64) and rotated.shape == (3, 64, 48)
    # turned 90 degrees clockwise: the left (dark) half is now the top
    assert int(rotated[:, :28].float().mean()) < 10 and int(rotated[:, 36:].float().mean()) > 210
    assert torch.equal(rotated, plain.rot90(-1, dims=(1, 2)))  # the same decoded pixels, turned


class BrokenTorchCodec(types.ModuleType):
    """torchcodec.decoders as an older torch sees it: its native library does not load."""

    def __getattr__(self, name):
        raise OSError("libtorchcodec_image.so: undefined symbol: _ZN3c10...")


@pytest.mark.parametrize(
    "installed, error", [(None, "ModuleNotFoundError"), (BrokenTorchCodec("torchcodec.decoders"), "OSError")]
)
def test_without_torchcodec_the_source_falls_back_to_torchvision_and_decodes_the_same(
    tmp_path, monkeypatch, caplog, installed, error
):
    """Where TorchCodec does not import (an older torch), torchvision.io decodes: the same frames
    (EXIF orientation applied, 16-bit kept), and torchvision 0.29's deprecation warning is not
    raised for that deliberate use (pytest -W error::DeprecationWarning would fail here)."""
    import sys

    folder = exif_folder(tmp_path)
    cv2 = pytest.importorskip("cv2")
    assert cv2.imwrite(str(folder / "d_deep.png"), np.full((24, 32, 3), 0x12F0, dtype=np.uint16))
    count = 4

    sources.image_decoder.cache_clear()
    with_torchcodec = images_source(folder)
    want = [with_torchcodec.read(i) for i in range(count)]
    assert sources.image_decoder() is not sources._torchvision_decode

    sources.image_decoder.cache_clear()
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", installed)
    try:
        with caplog.at_level("INFO", logger="camera-source"):
            assert sources.image_decoder() is sources._torchvision_decode
        assert f"TorchCodec is not usable here ({error}: " in caplog.text
        fallback = images_source(folder)
        got = [fallback.read(i) for i in range(count)]
    finally:
        sources.image_decoder.cache_clear()
    assert fallback.skipped == 0 and with_torchcodec.skipped == 0
    for name, a, b in zip(sorted(p.name for p in folder.iterdir()), got, want):
        assert a.dtype == b.dtype == torch.uint8 and torch.equal(a, b), name


def test_emit_sends_frames_and_survives_send_failures(caplog):
    import logging

    from tensor_codec_nodes.camera_source.node import MAX_FAILURES_IN_A_ROW, emit

    node = FakeNode(fail="no room", fail_times=2)
    camera = synthetic_camera(frames=5)
    log = logging.getLogger("test")
    while emit(Link.of(node).output("image"), camera, log):
        pass
    assert (camera.sent, camera.failed, len(node.sent)) == (3, 2, 3)
    assert [m[2][P.FRAME] for m in node.sent] == [2, 3, 4] and all(P.SENT_NS in m[2] for m in node.sent)
    assert "frame 1 skipped: RuntimeError" in caplog.text
    broken = synthetic_camera(frames=0)
    failing = Link.of(FakeNode(fail="no room")).output("image")
    assert sum(1 for _ in iter(lambda: emit(failing, broken, log), False)) == MAX_FAILURES_IN_A_ROW - 1


def test_nodes_wait_for_cuda_ipc_receivers_before_exiting(monkeypatch, caplog):
    import logging

    import tensor_codec as tc
    from tensor_codec_nodes.common.runtime import finish_sharing

    log = logging.getLogger("camera-source-test")
    finish_sharing(log)  # nothing was shared: returns at once, says nothing
    calls = []
    monkeypatch.setattr(tc, "ipc_flush", lambda timeout_s: calls.append(timeout_s) or False)
    with caplog.at_level(logging.WARNING, logger="camera-source-test"):
        finish_sharing(log, 3.0)
    assert calls == [3.0]
    assert "still held by receivers after 3 s" in caplog.text


def test_frames_past_what_a_receiver_counts_is_a_setting_error():
    from tensor_codec_nodes.common import protocol as P
    from tensor_codec_nodes.common.settings import SettingError

    assert load_config({"FRAMES": str(P.MAX_COUNT)}).frames == P.MAX_COUNT
    with pytest.raises(SettingError, match="FRAMES: expected an integer from 0 to 4294967296, got 4294967297"):
        load_config({"FRAMES": str(P.MAX_COUNT + 1)})


def test_the_camera_ends_a_rounds_reading_only_at_an_ack_that_opened_its_window():
    """Sending as fast as it can without acks, it still reads every round (STOP must reach it);
    with acks, an ack that frees the full window ends the round's reading, junk does not."""
    import logging

    from tensor_codec_nodes.camera_source.node import CameraSource
    from tensor_codec_nodes.common import protocol as P
    from tests.support.fakes import FakeNode

    def started(inputs):
        camera = CameraSource(load_config({"WIDTH": "64", "HEIGHT": "64", "FPS": "0", "WINDOW": "2"}), CPU, log)
        camera.start(Link.of(FakeNode(node_id="camera", inputs=inputs, outputs=["image"])))
        return camera

    log = logging.getLogger("camera-test")
    plain = started([])
    plain.work()
    assert plain.more_events()
    acked = started(["ack"])
    acked.work()
    acked.just_sent = False
    acked.work()
    assert acked.outbox.room() == 0 and acked.more_events()
    acked.on_input({"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 9, P.STREAM: "junk"}})
    assert acked.more_events()
    first = next(m for m in (e[2] for e in acked.output.link.node.sent) if m[P.SEQ] == 0)
    acked.on_input({"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 0, P.STREAM: first[P.STREAM], P.TX: first[P.TX]}})
    assert not acked.more_events()
    acked.work()
    assert acked.more_events()
