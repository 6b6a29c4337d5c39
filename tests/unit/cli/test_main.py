"""podnetctl's command tree (:mod:`podnet.cli.main`): the set of commands, a help text for every
one, the version, and errors printed as one line. No root."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from cli_calls import run
from podnet.cli.main import cli, error_line


def walk(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the public API: subcommands may load lazily
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))


COMMANDS = list(walk(cli))


def test_command_set() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert names >= {
        "net",
        "net add",
        "net check",
        "net del",
        "net gc",
        "net status",
        "install",
        "pods",
        "ports",
        "ranges",
        "demo",
    }


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    assert command.help and command.help.strip(), f"{' '.join(path)} has no help text"
    out = run(*path, "--help")
    assert out.exit_code == 0, out.output
    assert command.help.strip().splitlines()[0][:40] in " ".join(out.output.split())
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"


def test_top_level_help_and_version() -> None:
    out = run("--help")
    assert out.exit_code == 0 and "net" in out.output and "install" in out.output
    assert run("--version").output.startswith("podnetctl, version ")


def test_error_line_is_one_line() -> None:
    from podnet.errors import CNIError

    err = CNIError("plugin podnet failed (add): nft failed", "line one\nline two", code=104)
    assert (
        error_line(err)
        == "plugin podnet failed (add): nft failed [CNI code 104]; line one line two"
    )
    assert error_line(FileNotFoundError(2, "No such file or directory", "/x")) == (
        "No such file or directory: /x"
    )
