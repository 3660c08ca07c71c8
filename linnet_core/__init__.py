"""Linnet: one description of a decoder-only transformer, compiled to many engines."""

__version__ = "0.1.0"
