"""The invoke tasks' options, from where they are declared: a `python -m repro` command's from the CLI table
(repro/cli_table.py), a job's from its request dataclass (repro/host/jobs.py). Here they become a task's signature
and, back, the command line or the request; tasks.py declares none of them again. No invoke import: tasks.py
wraps the signatures into tasks."""

from __future__ import annotations

import dataclasses
import inspect

from ..cli_table import COMMANDS, Option

KEYWORD = inspect.Parameter.KEYWORD_ONLY


def cli_options(command: str) -> list[Option]:
    return [o for o in COMMANDS[command].flat() if o.flags[0].startswith("--")]


def _param(name: str) -> str:
    return name.replace("-", "_")


def _default(option: Option) -> object:
    """What the task shows when the option is not given: off, none, or an empty list (a repeatable option)."""
    if option.spec.get("action") in ("store_true", "store_false"):
        return False
    return [] if option.spec.get("action") == "append" or option.spec.get("nargs") == "+" else None


def signature(command: str = "", request: type | None = None, extra: dict[str, tuple] | None = None,
              exclude: tuple[str, ...] = ()):  # fmt: skip
    """A task body's signature (context first), its help by option name, and its repeatable options: the CLI
    command's options but `exclude`, a request dataclass's fields (their defaults), and `extra` (name: (default,
    help))."""
    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    helps: dict[str, str] = {}
    for option in (o for o in cli_options(command) if o.name not in exclude) if command else []:
        params.append(inspect.Parameter(_param(option.name), KEYWORD, default=_default(option)))
        helps[option.name] = option.spec.get("help", "")
    for f in dataclasses.fields(request) if request else []:
        if f.metadata.get("help"):  # a field without help is the job's own, not an option
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            params.append(inspect.Parameter(f.name, KEYWORD, default=default))
            helps[f.name.replace("_", "-")] = f.metadata["help"]
    for name, (default, text) in (extra or {}).items():
        params.append(inspect.Parameter(_param(name), KEYWORD, default=default))
        helps[name] = text
    iterable = [p.name for p in params if p.default == []]
    return inspect.Signature(params), helps, iterable


def cli_argv(command: str, given: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """The command line a task's options stand for; an option left at its default is not given."""
    argv: list[str] = []
    for option in cli_options(command):
        value, flag = given.get(_param(option.name)), option.flags[0]
        if option.name in skip or value in (None, False, []):
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            argv += [x for v in value for x in (flag, v)] if option.spec.get("action") == "append" else [flag, *value]
        else:
            argv += [flag, str(value)]
    return argv
