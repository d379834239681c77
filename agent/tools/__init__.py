"""Developer tools behind the command line that compose pipeline pieces (not part of a call)."""
