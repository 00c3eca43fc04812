"""The operator's CLI (``signoff``): ``main(argv) -> int``, and the demo."""

from bot.cli.commands import main

__all__ = ["main"]
