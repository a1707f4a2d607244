"""The control ops (being filled in with the family)."""

__all__: list[str] = []
