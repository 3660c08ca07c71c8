"""The one user-facing error type: the CLIs print its message on one line and exit 1."""


class UserError(Exception):
    """Bad input or an unusable environment, said in one line a user can act on."""
