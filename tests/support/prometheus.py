"""A Prometheus text page read back as numbers, for tests of what a server exports."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(body: bytes) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text page, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
