"""The one user-facing error type: the CLIs print its message on one line and exit 1; and `literal`, the one way text
from a file, a flag or a path reaches a rich console."""

import re


LONGEST_SHOWN = 300  # characters of one value a message shows: a 5 MB label is not printed whole


class UserError(Exception):
    """Bad input or an unusable environment, said in one line a user can act on."""


def printable(text: str) -> str:
    """text on one line: line breaks and other control characters as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def literal(value: object, limit: int = LONGEST_SHOWN) -> str:
    """Any value as text for rich's markup: one line, at most `limit` characters (and how many there were), and every
    square bracket escaped, so that a "[/]" in a runner id, a label or a path is printed as written instead of raising
    rich's MarkupError, "[old]" in a path is not taken for a style, and no two values printed side by side make a tag
    between them ("[a" ... "b]"). As rich.markup.escape does for what looks like a tag: the backslashes before a "["
    doubled and one more to escape it; a trailing run of backslashes doubled, for the tag that may follow. (rich then
    prints twice the backslashes before a bracket that starts no tag, and a trailing run that no tag follows.)"""
    text = printable(str(value))
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} characters)"
    text = re.sub(r"(\\*)\[", lambda m: f"{m.group(1) * 2}\\[", text)
    return re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)


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
        console.print(f"[red]error:[/] {literal(e, 2000)}", highlight=False, soft_wrap=True)  # "[cluster]" is no markup
        sys.exit(1)
    except KeyboardInterrupt:  # one that arrives outside click's handling (while starting up)
        console.print("[yellow]interrupted[/]", highlight=False)
        sys.exit(130)


def sigterm_as_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt
