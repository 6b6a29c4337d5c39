"""podnetctl called in process (click's ``CliRunner``) or as the installed script."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from podnet.cli.main import cli

PODNETCTL = str(Path(sys.executable).parent / "podnetctl")


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    # click < 8.2 mixes stderr into output unless told not to; 8.2 removed the option.
    separate = "mix_stderr" in inspect.signature(CliRunner).parameters
    runner = CliRunner(mix_stderr=False) if separate else CliRunner()  # type: ignore[call-arg]
    return runner.invoke(cli, list(args), env=env)
