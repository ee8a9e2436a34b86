"""What every tc-* node does before it joins a dataflow: answer `--help` and `--version` from its
spec, and check how the dataflow sets it up (`preflight`).

Each check here catches a mistake that otherwise runs to the end silently: an env name with a
typo (`FRAMEZ`) leaves the setting at its default (FRAMES=0: the camera never ends); an input
wired under an id the node does not read (`image:` instead of `frames:`) delivers messages the
node ignores, so it finishes with 0 frames and exit status 0; an output the node sends on but the
dataflow does not declare drops everything. The help text and the checks read the same `NodeSpec`
the manifest is written from.

What the checks find is split in two (`Problems`):

- errors: the node refuses to start (the loop exits with status 2, EXIT_BAD_CONFIG): an env name
  given to the node that is not a setting but a setting's name with one slip (`is_slip`: a letter
  wrong, two swapped, one missing or one too many inside it, or another case), an input id the node
  does not read, a required input not wired. They are
  checked before the node joins, from what the daemon hands the process (DORA_NODE_CONFIG: the
  node's wiring and the dataflow's descriptor), so a node that refuses never joins and dora does
  not start the dataflow: the other nodes fail to join and `dora run` ends at once, naming it.
  A DORA_NODE_CONFIG that is not what a daemon writes in a way that would cost the node to read
  (not UTF-8, YAML anchors or aliases) is refused the same way, before anything parses it.
- warnings: logged, the node starts (the dataflow may be right in a way this cannot see): an env
  name that is no setting (a library may read it; one close to a setting but no slip of it, such
  as DEVICE_ID, MODEL or SIZE beside DEVICE, MODE and SIZES, is named with the setting it
  resembles), outputs the node does not send or none declared. Names libraries read (OMP_*,
  CUDA_*, TC_*, DORA_*, LANG, ...) are never looked at.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import textwrap
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from .manifest import NodeSpec, Port
from .registry import PROJECT
from .settings import Setting

if TYPE_CHECKING:  # tensor_codec loads torch: never for --help
    from tensor_codec.dora import Link

__all__ = [
    "help_text",
    "answer_command_line",
    "version_text",
    "outside_dora",
    "Problems",
    "close_setting_names",
    "is_slip",
    "env_problems",
    "wiring_problems",
    "dora_node_config",
    "HostileNodeConfig",
    "preflight",
    "join_dataflow",
]

WIDTH = 100
# Environment names read by others than the settings tables: the project's own (tensor_codec's
# limits and transport choice: TC_*), dora's, Python's and uv's, and those of the libraries a node
# loads (OpenMP, MKL, OpenBLAS, CUDA, NCCL, torch, Hugging Face, the dynamic linker, the locale).
# Never "close to a setting" by mistake, never warned about: a dataflow sets them on purpose.
_OTHER_PREFIXES = (
    "TC_",
    "DORA_",
    "CUDA_",
    "CUBLAS",
    "CUDNN_",
    "NCCL_",
    "NVIDIA_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "HF_",
    "LD_",
    "LC_",
    "LANG",
    "RUST_",
    "PYTHON",
    "UV_",
)
_OTHER_NAMES = frozenset({"PATH", "HOME", "USER", "SHELL", "TERM", "TZ", "TMPDIR", "DISPLAY", "PWD"})
# The libraries `--version` names, after the project itself (PROJECT; distribution names, read from
# their metadata: importing torch for it would cost seconds).
VERSIONED = ("dora-rs", "torch", "torchvision", "pyarrow")


# ------------------------------------------------------------------------------------ --help
def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent)


def _port_lines(port: Port) -> list[str]:
    flag = " (optional)" if port.optional else ""
    description = port.description.removeprefix("Optional. ") if port.optional else port.description
    lines = [f"  {port.id}{flag}", _wrap(description, 6)]
    for key, meaning in port.metadata.items():
        lines.append(_wrap(f"{key}: {meaning}", 8))
    return lines


def _setting_lines(s: Setting) -> list[str]:
    allowed = " | ".join(s.choices) if s.choices else s.type
    if s.minimum is not None or s.maximum is not None:
        low = "" if s.minimum is None else f"{s.minimum:g}"
        high = "" if s.maximum is None else f"{s.maximum:g}"
        allowed += f", {low}..{high}"
    default = repr(s.default) if s.default == "" else s.default
    when = f"; required when {s.required_when}" if s.required_when else ""
    return [f"  {s.name} = {default}    ({allowed}{when})", _wrap(s.description, 6)]


def help_text(spec: NodeSpec) -> str:
    """The node's inputs, outputs and settings with their defaults, as `--help` prints them."""
    out = [f"{spec.name}: a dora node", _wrap(spec.description, 2), ""]
    out.append("Inputs (wired in the dataflow's `inputs:`):")
    for port in spec.inputs:
        out += _port_lines(port)
    out += ["", "Outputs (declare the ones you use in `outputs:`; metadata keys indented):"]
    for port in spec.outputs:
        out += _port_lines(port)
    out += ["", "Settings (environment variables, the dataflow's `env:`; shown with their defaults):"]
    for setting in spec.settings:
        out += _setting_lines(setting)
    out += ["", "Example dataflow:", textwrap.indent(spec.example.rstrip(), "  ")]
    out += [
        "",
        f"Run it from a dataflow: `path: {spec.name}` (its directory must be on PATH), then `dora run dataflow.yml`.",
        f"`{spec.name} --version` prints its version and its libraries'.",
    ]
    return "\n".join(out)


def _installed(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_text(spec: NodeSpec) -> str:
    """`--version`: the node with the project's version, then each library that matters, one a
    line, from the installed packages' metadata (nothing is imported)."""
    lines = [f"{spec.name}: {PROJECT} {_installed(PROJECT)}"]
    lines += [f"{name} {_installed(name)}" for name in VERSIONED]
    return "\n".join(lines)


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `--help | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def answer_command_line(spec: NodeSpec, argv: list[str] | None = None) -> int | None:
    """`--help` / `-h`: print the help, -> 0. `--version` / `-V`: the versions, -> 0. Any other
    argument: say that settings are environment variables, -> 2. No arguments: None (go on)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        return None
    if args[0] in ("-h", "--help"):
        _print(help_text(spec))
        return 0
    if args[0] in ("-V", "--version"):
        _print(version_text(spec))
        return 0
    print(
        f"{spec.name}: unexpected argument {args[0]!r:.60}: this node takes its settings from environment variables "
        f"(a dataflow's `env:`); `{spec.name} --help` lists them",
        file=sys.stderr,
    )
    return 2


def outside_dora(spec: NodeSpec, env: Mapping[str, str] = os.environ) -> bool:
    """True (after saying so on stderr) when the process was not started by a dora daemon:
    dora's `Node()` would end it with a Rust backtrace about DORA_NODE_CONFIG."""
    if "DORA_NODE_CONFIG" in env or "DORA_TEST_WITH_INPUTS" in env:
        return False
    print(
        f"{spec.name} is a dora node: start it from a dataflow (`path: {spec.name}` in the YAML, then "
        f"`dora run dataflow.yml`); `{spec.name} --help` lists its inputs, outputs and settings",
        file=sys.stderr,
    )
    return True


# ------------------------------------------------------------------------------------ checks
class Problems(NamedTuple):
    """What a check found in how the dataflow sets up a node."""

    errors: list[str]  # the node refuses to start (exit status 2)
    warnings: list[str]  # logged; the node starts


def _for_others(name: str) -> bool:
    return name in _OTHER_NAMES or name.upper().startswith(_OTHER_PREFIXES)


def close_setting_names(spec: NodeSpec, names: Iterable[str], *, any_case: bool = False) -> list[tuple[str, str]]:
    """(name, setting) for each UPPERCASE name that is not a setting of the node but close to one
    (difflib: a typo, WIDHT -> WIDTH, or another word, DEVICE_ID -> DEVICE; `is_slip` tells them
    apart); `any_case`: any name, compared also in upper case (`frames` -> FRAMES). Names others
    read (TC_*, DORA_*, OMP_*, ...) are skipped."""
    known = [s.name for s in spec.settings]
    found = []
    for name in sorted(set(names)):
        if name in known or _for_others(name) or not (any_case or name.isupper()):
            continue
        match = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if not match and any_case:
            match = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.8)
        if match:
            found.append((name, match[0]))
    return found


def is_slip(name: str, setting: str) -> bool:
    """True when `name` is `setting` typed with one slip of the hand, as a user who meant the
    setting would type it: another case, one letter wrong, two neighbours swapped, or one letter
    missing or one too many inside it (QUALTY, FRAMMES). A letter more or less at either end makes another word a
    library or a wrapper may read (MODEL, SIZE, COUNTS beside MODE, SIZES, COUNT): no slip."""
    typed, meant = name.upper(), setting.upper()
    if len(typed) == len(meant):
        differ = [i for i, (a, b) in enumerate(zip(typed, meant)) if a != b]
        if len(differ) <= 1:
            return True
        first, second = differ[0], differ[-1]
        swapped = (typed[first], typed[second]) == (meant[second], meant[first])
        return len(differ) == 2 and second == first + 1 and swapped
    shorter, longer = sorted((typed, meant), key=len)
    if len(longer) - len(shorter) != 1:
        return False
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(1, len(longer) - 1))


def env_problems(spec: NodeSpec, names: Iterable[str], *, from_dataflow: bool) -> Problems:
    """The env names given to the node that are not its settings. `from_dataflow`: the names the
    dataflow's `env:` gives this node (each was meant for someone): a slip of a setting's name
    (`is_slip`: FRAMEZ, `frames`) is an error; any other is a warning (a library may read it),
    naming the setting it resembles where it is close to one (DEVICE_ID). Otherwise the names are
    the process's whole environment (dora did not say which are the dataflow's): only an UPPERCASE
    slip is an error, and only an UPPERCASE name close to a setting a warning."""
    names = set(names)
    close = close_setting_names(spec, names, any_case=from_dataflow)
    help_hint = f"`{spec.name} --help` lists its settings"
    errors = [
        f"env {name} is not a setting of {spec.name}: did you mean {setting}? ({help_hint})"
        for name, setting in close
        if is_slip(name, setting)
    ]
    resembled = {name: setting for name, setting in close if not is_slip(name, setting)}
    unknown = names - {s.name for s in spec.settings} - {name for name, _ in close} if from_dataflow else set()
    warnings = [
        f"env {name} is not a setting of {spec.name}: the node ignores it ("
        + (f"it resembles {resembled[name]}; " if name in resembled else "")
        + f"a library may read it; {help_hint})"
        for name in sorted(resembled.keys() | unknown)
        if not _for_others(name)
    ]
    return Problems(errors, warnings)


def _matches(port: Port, port_id: str) -> bool:
    if port.id.startswith("<"):  # "<any id>"
        return True
    if port.id.endswith("*"):
        return port_id.startswith(port.id[:-1])
    return port_id == port.id


def _names(ports: Iterable[Port]) -> str:
    return ", ".join(f"`{p.id}`" for p in ports)


def wiring_problems(spec: NodeSpec, inputs: Iterable[str], outputs: Iterable[str]) -> Problems:
    """How the dataflow wires this node. Errors: inputs it does not read, inputs it needs that are
    not wired. Warnings: outputs it does not send, no outputs at all (dora would drop what it
    sends; the dataflow may want only the node's side effects)."""
    inputs, outputs = sorted(set(inputs)), sorted(set(outputs))
    errors, warnings = [], []
    for port_id in inputs:
        if not any(_matches(p, port_id) for p in spec.inputs):
            guess = difflib.get_close_matches(
                port_id, [p.id for p in spec.inputs if not p.id.startswith("<")], n=1, cutoff=0.0
            )
            hint = f"; did you mean `{guess[0]}`?" if guess else ""
            errors.append(
                f"input `{port_id}` is not one this node reads ({_names(spec.inputs)}): its messages would be "
                f"ignored{hint}"
            )
    for port in spec.inputs:
        if not port.optional and not port.id.startswith("<") and not any(_matches(port, i) for i in inputs):
            errors.append(
                f"input `{port.id}` is not wired: this node would get nothing to work on (wire it as `{port.id}: "
                "<node>/<output>`)"
            )
    for port_id in outputs:
        if not any(_matches(p, port_id) for p in spec.outputs):
            warnings.append(f"output `{port_id}` is not one this node sends ({_names(spec.outputs)})")
    needed = [p for p in spec.outputs if not p.optional]
    if needed and not outputs:
        warnings.append(f"declares no outputs: dora drops what this node sends (add `outputs: [{needed[0].id}]`)")
    return Problems(errors, warnings)


class HostileNodeConfig(ValueError):
    """DORA_NODE_CONFIG is not what a dora daemon writes, in a way that would cost the node to
    read (memory, a crash): the node does not start (exit status 2), saying why in one line."""


def dora_node_config(env: Mapping[str, str] = os.environ) -> dict | None:
    """What the daemon hands the process in DORA_NODE_CONFIG (`node_id`, `run_config` with the
    node's inputs and outputs, the `dataflow_descriptor`: tensor_codec's parse of it), read before
    joining; None when absent or unreadable (then the checks run once joined, on the node's Link).
    Raises HostileNodeConfig when it must not be read at all (`node_config_problem`)."""
    text = env.get("DORA_NODE_CONFIG")
    if not text:
        return None
    from tensor_codec.dora.descriptor import node_config_problem, parse_daemon_config  # torch: never for --help

    problem = node_config_problem(text)
    if problem is not None:
        raise HostileNodeConfig(problem)
    config = parse_daemon_config(text)
    return config if config is not None and isinstance(config.get("node_id"), str) else None


def _setup_of(source: dict | Link) -> tuple[list[str] | None, Iterable[str] | None, Iterable[str] | None]:
    """(env names the dataflow gives the node, its input ids, its output ids), None where unknown,
    from dora's config (a dict, before joining) or the joined node's Link (a test double's too)."""
    if isinstance(source, dict):
        from tensor_codec.dora.descriptor import env_names

        run_config = source.get("run_config")
        names = env_names(source.get("dataflow_descriptor"), source.get("node_id"))
        if not isinstance(run_config, dict):
            return names, None, None
        inputs, outputs = run_config.get("inputs") or {}, run_config.get("outputs") or []
        return names, [str(i) for i in inputs], [str(o) for o in outputs]
    if not source.config:  # a test double without a node config: nothing is known about the wiring
        return source.env_names(), None, None
    return source.env_names(), source.declared_inputs(), source.declared_outputs()


def preflight(source: dict | Link, spec: NodeSpec, log: logging.Logger) -> Problems:
    """Check how the dataflow sets this node up (the module's docstring): `source` is what the
    daemon hands the process (`dora_node_config`, before joining) or the joined node's Link. Each
    error is logged as one, then that the node does not start; each warning as one. -> what was
    found."""
    names, inputs, outputs = _setup_of(source)
    problems = env_problems(spec, os.environ if names is None else names, from_dataflow=names is not None)
    if inputs is not None and outputs is not None:  # without them (a test double) nothing is known of the wiring
        wiring = wiring_problems(spec, inputs, outputs)
        problems = Problems(problems.errors + wiring.errors, problems.warnings + wiring.warnings)
    for text in problems.errors:
        log.error("%s", text)
    for text in problems.warnings:
        log.warning("%s", text)
    if problems.errors:
        log.error(
            "%s is not starting (exit status 2): fix the dataflow's entry for this node (`%s --help` lists its "
            "inputs and settings)",
            spec.name,
            spec.name,
        )
    return problems


def _cause(error: Exception) -> str:
    """dora's reason, without its stack backtrace: the innermost cause anyhow lists (`Caused by:`,
    then `0: ...`, `1: ...`), else its first line."""
    lines = []
    for line in str(error).splitlines():
        if line.strip() in ("Location:", "Stack backtrace:"):
            break
        if line.strip():
            lines.append(line.strip())
    causes = [line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].isdigit()]
    return (causes[-1] if causes else lines[0] if lines else repr(error))[:1000]


def join_dataflow(spec: NodeSpec, log: logging.Logger) -> Link | None:
    """The node's `Link` (tensor_codec.dora: what dora says about the node, read once, and an
    Output per port) once joined: its wiring and env checked (`preflight`: before joining, from
    DORA_NODE_CONFIG; once joined, on the link, when that could not be read) and start-up's
    objects out of the garbage collector's way (`settle_heap`). None, and the node's main exits
    with status 2: not started by dora (`outside_dora` said so), the check found errors, or dora
    refused the node (another node of the dataflow refused to start: its log says why), or
    DORA_NODE_CONFIG must not be read (`node_config_problem`: then neither this node nor dora's
    `Node()` reads it)."""
    if outside_dora(spec):
        return None
    try:
        config = dora_node_config()
    except HostileNodeConfig as e:
        log.error("%s: %s is not starting (exit status 2)", e, spec.name)
        return None
    if config is not None and preflight(config, spec, log).errors:
        return None
    from dora import Node

    from tensor_codec.dora import Link

    from .runtime import settle_heap

    try:
        node = Node()
    except RuntimeError as e:
        log.error("could not join the dataflow: %s", _cause(e))
        return None
    link = Link.of(node, daemon_config=config) if config is not None else Link.of(node)  # parsed once
    if config is None and preflight(link, spec, log).errors:
        link.close()  # the Node leaves the dataflow once freed
        return None
    settle_heap()
    return link
