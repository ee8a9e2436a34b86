"""Node settings: one table per node is the single source for parsing, defaults and the manifest.

dora hands a node its `env:` values as strings. Each node declares its settings as `Setting`s;
`load_settings(env, table)` parses every one (or raises `SettingError` naming the setting, the
value that came and what is allowed), `settings_dataclass(table)` makes the node's config class
from the same table (a field per setting, its name lowercase: FPS -> fps), and `manifest.py`
writes the table into the node's `dora-node.yml` and startup.py into its `--help`: the settings
are written once, so the documentation cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Setting",
    "SettingError",
    "load_settings",
    "settings_dataclass",
    "parse_size",
    "parse_sizes",
    "parse_device_spec",
]


class SettingError(ValueError):
    """A bad node setting: the message names the setting, the value and what is allowed."""


@dataclass(frozen=True)
class Setting:
    name: str
    type: str  # a key of PARSERS; also the type shown in the manifest
    default: str
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    required_when: str = ""  # "SOURCE is camera, video or images": the default (empty) is not enough then
    # What the node's config holds, from the parsed value (CHANNELS "3" -> 3); may raise a
    # SettingError without the name. Not shown in the manifest: the type there is what is written.
    convert: Callable[[Any], Any] | None = None

    @property
    def field(self) -> str:
        """The config attribute: the name, lowercase (FPS -> fps)."""
        return self.name.lower()

    def parse(self, raw: str) -> Any:
        try:
            value = PARSERS[self.type](raw, self)
            return value if self.convert is None else self.convert(value)
        except SettingError as e:
            raise SettingError(f"{self.name}: {e}") from None


def _bounds(s: Setting, fmt) -> str:
    if s.minimum is not None and s.maximum is not None:
        return f" from {fmt(s.minimum)} to {fmt(s.maximum)}"
    if s.minimum is not None:
        return f" >= {fmt(s.minimum)}"
    return f" <= {fmt(s.maximum)}" if s.maximum is not None else ""


def _outside(value: float, s: Setting) -> bool:
    return (s.minimum is not None and value < s.minimum) or (s.maximum is not None and value > s.maximum)


def _int(raw: str, s: Setting) -> int:
    allowed = "an integer" + _bounds(s, lambda v: str(int(v)))
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingError(f"expected {allowed}, got {raw!r}") from None
    if _outside(value, s):
        raise SettingError(f"expected {allowed}, got {value}")
    return value


def _float(raw: str, s: Setting) -> float:
    allowed = "a number" + _bounds(s, lambda v: f"{v:g}")
    try:
        value = float(raw.strip())
    except ValueError:
        raise SettingError(f"expected {allowed}, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")) or _outside(value, s):
        raise SettingError(f"expected {allowed}, got {raw!r}")
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(raw: str, s: Setting) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingError(f"expected 1/0 (or true/false), got {raw!r}")


def _choice(raw: str, s: Setting) -> str:
    text = raw.strip().lower()
    if text not in s.choices:
        raise SettingError(f"expected one of {', '.join(s.choices)}, got {raw!r}")
    return text


def _text(raw: str, s: Setting) -> str:
    return raw.strip()


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_BINARY = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(raw: str) -> int:
    """'4096', '512KB', '16MB', '1.5MiB' -> bytes. KB, MB and GB are 1024-based (1MB = 2**20
    bytes, so sizes divide evenly into tensor elements); KiB, MiB and GiB mean the same."""
    m = _SIZE.match(raw)
    if not m:
        raise SettingError(f"expected a size such as 4096, 512KB or 16MB, got {raw!r}")
    number, unit = float(m.group(1)), (m.group(2) or "B").lower()
    value = number * _BINARY[unit[0]]
    if value != int(value):
        raise SettingError(f"expected a whole number of bytes, got {raw!r}")
    return int(value)


def parse_sizes(raw: str) -> tuple[int, ...]:
    parts = [p for p in raw.split(",") if p.strip()]
    if not parts:
        raise SettingError(f"expected a comma-separated list of sizes such as 1MB,16MB, got {raw!r}")
    return tuple(parse_size(p) for p in parts)


def _sizes(raw: str, s: Setting) -> tuple[int, ...]:
    return parse_sizes(raw)


def _size(raw: str, s: Setting) -> int:
    value = parse_size(raw)
    if value <= 0:
        raise SettingError(f"expected a size above 0, got {raw!r}")
    return value


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def parse_device_spec(raw: str) -> str:
    text = raw.strip().lower()
    if not _DEVICE.match(text):
        raise SettingError(f"expected auto, cpu, cuda or cuda:N, got {raw!r}")
    return text


def _device(raw: str, s: Setting) -> str:
    return parse_device_spec(raw)


PARSERS: dict[str, Callable[[str, Setting], Any]] = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "choice": _choice,
    "string": _text,
    "path": _text,
    "sizes": _sizes,
    "size": _size,
    "device": _device,
}


def load_settings(env: Mapping[str, str], table: Sequence[Setting]) -> dict[str, Any]:
    """Parse every setting of `table` from `env` (missing or empty -> the default)."""
    out: dict[str, Any] = {}
    for setting in table:
        raw = env.get(setting.name)
        if raw is None or raw.strip() == "":
            raw = setting.default
        out[setting.name] = setting.parse(raw)
    return out


_FIELD_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool, "sizes": tuple[int, ...], "size": int}


def _field_type(s: Setting) -> Any:
    if s.convert is not None:
        return s.convert if isinstance(s.convert, type) else Any
    return _FIELD_TYPES.get(s.type, str)


def settings_dataclass(table: Sequence[Setting]):
    """Class decorator: the class becomes a frozen dataclass with one field per setting of
    `table` (in its order, named `Setting.field`), `SETTINGS` (the table) and
    `from_env(env)` (every setting parsed: `load_settings`). What the class body declares
    besides (properties, a docstring) is kept. So a node's settings are written once, in the
    table its manifest and `--help` are generated from."""
    table = tuple(table)

    def build(cls):
        namespace = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        namespace["SETTINGS"] = table
        namespace["from_env"] = classmethod(_from_env)
        made = dataclasses.make_dataclass(
            cls.__name__, [(s.field, _field_type(s)) for s in table], namespace=namespace, frozen=True
        )
        made.__module__, made.__qualname__ = cls.__module__, cls.__qualname__
        return made

    return build


def _from_env(cls, env: Mapping[str, str]):
    return cls(**{name.lower(): value for name, value in load_settings(env, cls.SETTINGS).items()})
