"""What tests share and are not tests themselves: fakes named as such, a real server on
loopback, a simulated phone caller, the sample speech, and small helpers. Benchmarks use the
caller, the sample speech and the memory readings too."""
