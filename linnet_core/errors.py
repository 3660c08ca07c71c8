"""The one user-facing error type: the CLIs print its message on one line and exit 1."""

from rich.markup import escape


class UserError(Exception):
    """Bad input or an unusable environment, said in one line a user can act on."""


def run_cli(app, console) -> None:
    """Runs a typer app as a console script: click reports its own usage errors; a UserError is one line, exit 1."""
    import sys

    try:
        app()
    except UserError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)  # "[cluster]" is no markup
        sys.exit(1)
