"""Content-Security-Policy for the HTML the agent serves or writes (the call page, reports).

Inline ``<script>``/``<style>`` blocks are allowed by their hash, nothing else runs: text a
caller or a run folder put into the page can never become live markup.
"""

from __future__ import annotations

import base64
import hashlib
import re

BLOCK = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


def inline_hashes(html: str, tag: str) -> list[str]:
    """CSP source expressions (``'sha256-…'``) of every inline ``<tag>`` block."""
    return [
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for name, body in BLOCK.findall(html)
        if name == tag
    ]


def content_security_policy(html: str, **directives: str) -> str:
    """A policy that denies by default and runs only the page's own inline scripts (by hash).

    ``directives`` add or replace directives (``connect_src="'self'"`` -> ``connect-src
    'self'``); a ``script_src`` given is added to the hashes.
    """
    scripts = " ".join([*inline_hashes(html, "script"), directives.pop("script_src", "")])
    policy = {
        "default-src": "'none'",
        "script-src": scripts.strip() or "'none'",
        "style-src": " ".join(inline_hashes(html, "style")) or "'none'",
        "base-uri": "'none'",
        "form-action": "'none'",
    }
    policy |= {name.replace("_", "-"): value for name, value in directives.items()}
    return "; ".join(f"{name} {value}" for name, value in policy.items())
