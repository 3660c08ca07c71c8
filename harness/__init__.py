"""Linnet Bench: times every stack the same way, each in its own subprocess, and renders the results."""
