from __future__ import annotations

from collections.abc import Iterable, Mapping


class IllegalTransition(ValueError):
    """A move the state machine does not allow (a programming error, not a race)."""


def check_move(
    machine: str, allowed: Mapping[str, frozenset[str]], sources: Iterable[str], target: str
) -> None:
    for source in sources:
        if target not in allowed.get(source, frozenset()):
            raise IllegalTransition(f"{machine}: {source} -> {target} is not an allowed move")
