"""A runner whose stack is not installed."""

import linnet_missing_stack_package  # noqa: F401

from tests.fake_runners import Counting as Runner  # noqa: F401
