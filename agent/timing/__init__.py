"""Turn timeline, stage durations, budgets and summaries (names fixed in docs/design.md)."""
