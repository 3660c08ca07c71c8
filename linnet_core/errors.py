"""The one user-facing error type: the CLIs print its message on one line and exit 1."""

from rich.markup import escape


class UserError(Exception):
    """Bad input or an unusable environment, said in one line a user can act on."""


def run_cli(app, console) -> None:
    """Runs a typer app as a console script: click reports its own usage errors; a UserError is one line, exit 1.
    SIGTERM is handled as Ctrl-C (KeyboardInterrupt), so that `kill`, a CI timeout or a container stop end children,
    remove temporary files and keep partial results exactly as Ctrl-C does (click reports an interrupt it sees as
    "Aborted!", exit 1; `linnet-bench run` says what it kept, exit 130; `linnet serve` stops cleanly, exit 0)."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, sigterm_as_ctrl_c)
    try:
        app()
    except UserError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)  # "[cluster]" is no markup
        sys.exit(1)
    except KeyboardInterrupt:  # one that arrives outside click's handling (while starting up)
        console.print("[yellow]interrupted[/]", highlight=False)
        sys.exit(130)


def sigterm_as_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt
