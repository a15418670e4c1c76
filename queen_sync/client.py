"""Placeholder: replaced by the client implementation."""


class Queen:  # pragma: no cover - placeholder
    pass
