"""Chat engines: the one streaming interface the LLM stage talks to, and the failover wrapper."""
