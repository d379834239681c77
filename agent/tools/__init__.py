"""Tools the model calls inside a turn, and the documents it may read (knowledge)."""
