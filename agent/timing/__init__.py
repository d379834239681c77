"""Turn timeline, stage durations, budgets and summaries (names fixed by DESIGN.md)."""
