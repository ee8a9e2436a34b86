"""Which JPEG library a node encodes or decodes with: ENGINE=auto|torchcodec|torchvision|nvimgcodec.

- torchcodec: TorchCodec (>= 0.16), JPEG on the CPU (libjpeg-turbo) and CUDA (nvJPEG on the
  caller's current stream, per call). The default wherever it imports.
- torchvision: torchvision.io's codecs, deprecated since torchvision 0.29 in favour of TorchCodec;
  kept for an older torch where TorchCodec does not import.
- nvimgcodec: NVIDIA nvImageCodec (the optional extra `nvimgcodec`), batched encode and decode on a
  given CUDA stream; on the CPU its own CPU backends.

`auto` prefers, on CUDA, nvimgcodec > torchcodec > torchvision; on the CPU, torchcodec >
torchvision > nvimgcodec (its CPU backends are slower than libjpeg-turbo; it is taken only for what
the others cannot write, SUBSAMPLING=444). An engine that does not import, or cannot write the
subsampling asked for, is passed over, and the choice says why (the node logs it once at start);
so is one that imports but cannot start here (start_engine: nvImageCodec on a GPU where none of
its GPU backends can be created, say), and the next one is taken.

Subsampling of colour JPEGs (SUBSAMPLING=auto|420|444). Two of the libraries fix it: libjpeg's
defaults (TorchCodec's and torchvision's CPU encoders) write 4:2:0, and both libraries' nvJPEG
encoders write 4:4:4. nvImageCodec writes either. `auto`, the default, is each engine's own, and
4:2:0 where the engine can choose: it is what cameras, browsers and libjpeg write, a third smaller
than 4:4:4 at the same quality, and it keeps PSNR well inside the bounds on the test pattern (44 dB
at quality 90 on 4K). A greyscale frame is always one component, whatever the setting.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ENGINES",
    "ENGINE_CHOICES",
    "SUBSAMPLING_CHOICES",
    "EngineChoice",
    "EngineError",
    "unavailable",
    "encoder_subsamplings",
    "choose_encoder",
    "choose_decoder",
    "start_engine",
]

ENGINES = ("torchcodec", "torchvision", "nvimgcodec")
ENGINE_CHOICES = ("auto", *ENGINES)
SUBSAMPLING_CHOICES = ("auto", "420", "444")

_PREFERRED = {"cuda": ("nvimgcodec", "torchcodec", "torchvision"), "cpu": ("torchcodec", "torchvision", "nvimgcodec")}
_INSTALL = {
    "torchcodec": "pip install 'torchcodec>=0.16' (it needs torch >= 2.11)",
    "torchvision": "a torchvision built with its image extension",
    "nvimgcodec": "pip install 'dora-tensor-codec[nvimgcodec]' (nvidia-nvimgcodec-cu13 and nvidia-nvjpeg)",
}


class EngineError(ValueError):
    """ENGINE / SUBSAMPLING cannot be met here: names the setting, what was asked and why not."""


@dataclass(frozen=True)
class EngineChoice:
    name: str  # one of ENGINES
    subsampling: str | None  # "420" or "444" for colour JPEGs (encoders); None for decoders
    why: str | None  # when `auto` passed an engine over: which, and why

    def describe(self) -> str:
        """The node's start-up line: `engine=<name>` (and why, when auto fell back)."""
        sub = f" subsampling={self.subsampling}" if self.subsampling else ""
        return f"engine={self.name}{sub}" + (f" (auto: {self.why})" if self.why else "")


def _quiet_import(module: str):
    """Import `module` with file descriptor 2 sent to a temporary file: nvImageCodec's C++ side
    prints a paragraph per codec library it cannot load (nvJPEG2000, nvTIFF, ...) at import.
    -> (module or None, the exception or None, what it printed)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            loaded, error = importlib.import_module(module), None
        except Exception as e:  # ImportError, OSError from a missing shared library, ...
            loaded, error = None, e
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        printed = sink.read().decode("utf-8", "replace")
    return loaded, error, printed


@functools.cache
def unavailable(name: str, device_type: str = "cpu") -> str | None:
    """None when engine `name` can run on `device_type` ("cpu" or "cuda") in this process, else
    why not (one line). Cached: each library is imported at most once."""
    if name == "torchcodec":
        try:
            importlib.import_module("torchcodec.encoders")
            importlib.import_module("torchcodec.decoders")
        except Exception as e:
            return (
                f"torchcodec does not import ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                f"{_INSTALL[name]}"
            )
        return None
    if name == "torchvision":
        try:
            from torchvision.io import image as tv_image

            if not getattr(tv_image, "_has_image_ops", lambda: True)():  # a private helper, present in 0.26 to 0.29
                return "torchvision's image extension is not loaded"
        except Exception as e:
            return f"torchvision.io does not import ({type(e).__name__}: {e})"
        return None
    if name == "nvimgcodec":
        module, error, printed = _quiet_import("nvidia.nvimgcodec")
        if module is None:
            what = "not installed" if isinstance(error, ModuleNotFoundError) else f"{type(error).__name__}: {error}"
            return f"nvImageCodec: {what}; {_INSTALL[name]}"
        if device_type == "cuda" and "Failed to load nvjpeg library" in printed:
            return "nvImageCodec cannot load libnvjpeg, so it has no CUDA JPEG codec: pip install nvidia-nvjpeg"
        return None
    raise EngineError(f"ENGINE: expected one of {', '.join(ENGINE_CHOICES)}, got {name!r}")


def encoder_subsamplings(name: str, device_type: str) -> tuple[str, ...]:
    """The chroma subsamplings engine `name` can write for colour frames on `device_type`, its
    default first."""
    if name == "nvimgcodec":
        return ("420", "444")
    return ("444",) if device_type == "cuda" else ("420",)


def _check_engine(engine: str) -> None:
    if engine not in ENGINE_CHOICES:
        raise EngineError(f"ENGINE: expected one of {', '.join(ENGINE_CHOICES)}, got {engine!r}")


def _device_type(device) -> str:
    """ "cuda" or "cpu" for a torch.device or its name (torch is not imported here: a node's --help
    reads this module's choices without it)."""
    kind = getattr(device, "type", None) or str(device).split(":", 1)[0]
    return "cuda" if kind == "cuda" else "cpu"


def _usable(name: str, kind: str, failed: Mapping[str, str] | None) -> str | None:
    """Why auto must pass engine `name` over on `kind` (None: it may take it): it does not import,
    or it already failed to start in this process (`failed`: name -> why)."""
    if failed and name in failed:
        return f"could not start: {failed[name]}"
    return unavailable(name, kind)


def choose_encoder(engine: str, subsampling: str, device, failed: Mapping[str, str] | None = None) -> EngineChoice:
    """The engine an encoder node uses for ENGINE=`engine`, SUBSAMPLING=`subsampling` on `device`;
    EngineError when none can. `failed`: the engines auto must pass over, as they could not start."""
    kind = _device_type(device)
    _check_engine(engine)
    if subsampling not in SUBSAMPLING_CHOICES:
        raise EngineError(f"SUBSAMPLING: expected one of {', '.join(SUBSAMPLING_CHOICES)}, got {subsampling!r}")
    if engine != "auto":
        reason = unavailable(engine, kind)
        if reason:
            raise EngineError(f"ENGINE={engine}: cannot be used on {kind}: {reason}")
        offered = encoder_subsamplings(engine, kind)
        if subsampling != "auto" and subsampling not in offered:
            raise EngineError(
                f"SUBSAMPLING={subsampling}: ENGINE={engine} on {kind} writes {' or '.join(offered)} only; "
                f"use SUBSAMPLING=auto{'' if engine == 'nvimgcodec' else ', or ENGINE=nvimgcodec, which writes both'}"
            )
        return EngineChoice(engine, subsampling if subsampling != "auto" else offered[0], None)
    passed: list[str] = []
    for name in _PREFERRED[kind]:
        reason = _usable(name, kind, failed)
        if reason is None:
            offered = encoder_subsamplings(name, kind)
            if subsampling == "auto" or subsampling in offered:
                return EngineChoice(
                    name, subsampling if subsampling != "auto" else offered[0], "; ".join(passed) or None
                )
            reason = f"writes {' or '.join(offered)} only, SUBSAMPLING={subsampling}"
        passed.append(f"{name} passed over: {reason}")
    raise EngineError(f"ENGINE=auto: no JPEG encoder on {kind} can be used: " + "; ".join(passed))


def choose_decoder(engine: str, device, failed: Mapping[str, str] | None = None) -> EngineChoice:
    """The engine a decoder node uses for ENGINE=`engine` on `device`; EngineError when none can.
    `failed`: the engines auto must pass over, as they could not start."""
    kind = _device_type(device)
    _check_engine(engine)
    if engine != "auto":
        reason = unavailable(engine, kind)
        if reason:
            raise EngineError(f"ENGINE={engine}: cannot be used on {kind}: {reason}")
        return EngineChoice(engine, None, None)
    passed: list[str] = []
    for name in _PREFERRED[kind]:
        reason = _usable(name, kind, failed)
        if reason is None:
            return EngineChoice(name, None, "; ".join(passed) or None)
        passed.append(f"{name} passed over: {reason}")
    raise EngineError(f"ENGINE=auto: no JPEG decoder on {kind} can be used: " + "; ".join(passed))


def start_engine(log, setting: str, device, choose, make):
    """A node's engine at start: `choose(failed)` -> EngineChoice, `make(choice)` -> the engine.
    -> (choice, engine), or None after logging why (the node then exits with status 2): the
    EngineError's own words, or the library that imported but could not start (no device memory,
    a driver, no backend it can create, ...). With ENGINE=auto, one that cannot start is passed
    over (`failed`: name -> why, which the choice then names) and the next is tried."""
    failed: dict[str, str] = {}
    while True:
        choice = None
        try:
            choice = choose(failed)
            made = make(choice)
            for name, why in failed.items():  # installed, preferred, and not working here: worth a warning
                log.warning("ENGINE=auto: %s could not start on %s (%s); using %s", name, device, why, choice.name)
            return choice, made
        except EngineError as e:
            log.error("%s", e)
        except Exception as e:
            what = choice.name if choice is not None else "the JPEG library"
            if setting == "auto" and choice is not None and choice.name not in failed:
                failed[choice.name] = f"{type(e).__name__}: {e}"
                continue
            log.error("ENGINE=%s: %s could not start on %s: %s: %s", setting, what, device, type(e).__name__, e)
        return None
