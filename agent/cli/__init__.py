"""The ``voice-agent`` command line: typer commands, flags -> settings, printing; nothing below
the command line imports it."""

from agent.cli.main import main

__all__ = ["main"]
