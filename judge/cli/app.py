"""The `judge` command group and what every command shares: the consoles, the context, JSON and error output,
the command decorator. judge.cli.main and the other command modules register their commands on `main`."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sqlite3
import sys
import traceback
from pathlib import Path

import click
from rich.console import Console

from .. import __version__
from ..contain import LINE_CAP, json_safe, terminal
from ..errors import JudgeError

# The CLI imports the library where a command calls it, never at the top of a command module: `judge --version`,
# and every command sent to a server, import no ledger, no pydantic records, no stages (an agent polls with them).

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Context:
    def __init__(self, ledger_path: Path, kernels: Path, server: str | None = None, as_json: bool = False):
        self.ledger_path = ledger_path
        self.kernels = kernels
        self.as_json = as_json  # --json before the subcommand
        self.creates = False  # set per command: only commands that add to a ledger may create one
        self._ledger = None
        self.remote = None
        if server:
            from .client import Remote

            self.remote = Remote(server, os.environ.get("JUDGE_TOKEN"))

    def call(self, name: str, *args):
        """The library call `name` ("module.function" under judge) as `function(ledger, *args)` on the local
        ledger, or with --server the server's answer to the same call (the client's method of that name); the
        module is imported only for a local call."""
        module, function = name.rsplit(".", 1)
        if self.remote is not None:
            return getattr(self.remote, function)(*args)
        return getattr(importlib.import_module(f"judge.{module}"), function)(self.ledger, *args)

    @property
    def ledger(self):
        """The local ledger (judge.ledger.Ledger), opened on first use."""
        if self._ledger is None:
            from ..ledger import Ledger

            self._ledger = Ledger(self.ledger_path, create=self.creates)
            self._ledger.on_wait = _say_waiting
        return self._ledger

    def explain(self, error: sqlite3.DatabaseError) -> JudgeError | None:
        return self._ledger.explain(error) if self._ledger is not None else None


def _say_waiting(ledger) -> None:
    from ..ledger import BUSY_S

    err.print(f"waiting for {ledger.path}: another judge process is writing to it (judge waits up to {BUSY_S} s)",
              markup=False)


def emit_json(data) -> None:
    """`--json` output: contestant text in it without escapes or control characters, each field capped
    (judge/contain.py json_safe); values in their declared JSON forms (judge.jsonform.jsonable), as the server sends them."""
    from ..jsonform import jsonable

    click.echo(json.dumps(json_safe(jsonable(data)), indent=2))


def fail(message: str, code: int, as_json: bool):
    """Every error's one way out: one line on stderr (one per mistake, where an input holds several), or under
    --json one JSON object on stdout (with `errors`, a list, where there are several); same exit code."""
    lines = message.splitlines() or [message]
    if as_json:
        click.echo(json.dumps(json_safe({"error": message, "exit": code,
                                         **({"errors": lines} if len(lines) > 1 else {})})))
    else:
        for line in lines:
            err.print(f"error: {terminal(line, LINE_CAP)}", markup=False)
    sys.exit(code)


def command(group, name=None, creates=False):
    """A subcommand with `--json`, whose JudgeError (or a ledger SQLite refuses) is one line and exit code 2.
    `creates`: whether it may create a missing ledger (others refuse one, so a mistyped --ledger is an error)."""

    def wrap(fn):
        @group.command(name)
        @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
        @click.pass_obj
        @functools.wraps(fn)
        def run(ctx, *args, **kwargs):
            ctx.creates = creates
            kwargs["as_json"] = kwargs.get("as_json") or ctx.as_json
            try:
                return fn(ctx, *args, **kwargs)
            except JudgeError as error:
                fail(error.message, getattr(error, "exit", 2), kwargs.get("as_json"))
            except sqlite3.DatabaseError as error:
                explained = ctx.explain(error)
                if explained is None:
                    raise
                fail(explained.message, 2, kwargs.get("as_json"))

        return run

    return wrap


class JudgeGroup(click.Group):
    """Under --json every failure, click's usage errors and judge's own bugs included, is one JSON object on
    stdout with the exit code it would have had anyway (a bug's traceback still goes to stderr)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv or not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as error:
            fail(error.format_message(), error.exit_code, True)
        except click.exceptions.Abort:
            fail("aborted", 1, True)
        except Exception as error:
            traceback.print_exc()
            fail(f"internal error: {type(error).__name__}: {error}", 1, True)
        sys.exit(code if isinstance(code, int) else 0)


LEDGER_HELP = ("The SQLite ledger. init, submit, shark add and run --target create it when it is missing; "
               "every other command refuses a missing ledger.")


@click.group(cls=JudgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path), default=Path("ledger.db"), show_default=True,
              envvar="JUDGE_LEDGER", help=LEDGER_HELP)
@click.option("--kernels", type=click.Path(path_type=Path), default=Path("kernels"), show_default=True,
              help="Where target directories live.")
@click.option("--server", envvar="JUDGE_SERVER", metavar="URL",
              help="Send the command to a judge server (judge serve) instead of a local ledger, with the token in "
                   "JUDGE_TOKEN.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON (also taken after the command).")
@click.version_option(__version__, prog_name="judge")
@click.pass_context
def main(click_ctx, ledger_path: Path, kernels: Path, server: str | None, as_json: bool):
    """judge: the referee for GPU-kernel optimization contests."""
    click_ctx.obj = Context(ledger_path, kernels, server, as_json)
