"""Reading the YAML files a user edits (config, latency budget), every problem as one line."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from agent.errors import UserError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A key given twice is an error: YAML's last-one-wins would silently drop an edit."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own error names it
            if key in seen:
                raise ConstructorError(
                    None, None, f"found the key {key!r} twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path, what: str) -> Any:
    """The document in ``path``; ``what`` names the file in the error ("config file")."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise UserError(f"{what} {path} is not valid YAML: {detail}") from None
