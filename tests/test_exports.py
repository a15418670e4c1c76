"""The public names (issue 13 item 5): the builders and consumer types are exported, and
``help(queen_sync)`` leads from the client to the builder methods and back."""

from __future__ import annotations

import pydoc

import queen_sync


def test_builders_and_consumer_types_are_public() -> None:
    for name in ("Queen", "QueueBuilder", "TransactionBuilder", "Consumer", "ConsumeResult", "Message"):
        assert name in queen_sync.__all__
        assert getattr(queen_sync, name).__name__ == name
    from queen_sync.consumer import ConsumeResult, Consumer
    from queen_sync.queues import QueueBuilder
    from queen_sync.transactions import TransactionBuilder

    assert queen_sync.QueueBuilder is QueueBuilder and queen_sync.TransactionBuilder is TransactionBuilder
    assert queen_sync.Consumer is Consumer and queen_sync.ConsumeResult is ConsumeResult


def test_every_public_name_exists() -> None:
    for name in queen_sync.__all__:
        assert hasattr(queen_sync, name), name


def test_help_leads_to_the_builder_methods() -> None:
    text = pydoc.render_doc(queen_sync, renderer=pydoc.plaintext)
    for needle in ("class QueueBuilder", "class TransactionBuilder", "class Consumer", "class ConsumeResult",
                   "consume(self, handler", "commit(self", "pop(self)", "push(self"):
        assert needle in text, needle


def test_client_and_builders_point_to_each_other() -> None:
    queen_doc = queen_sync.Queen.__doc__ or ""
    for name in ("QueueBuilder", "TransactionBuilder", "Consumer"):
        assert name in queen_doc, name
    assert "Queen.queue" in (queen_sync.QueueBuilder.__doc__ or "")
    assert "Queen.transaction" in (queen_sync.TransactionBuilder.__doc__ or "")
    assert "QueueBuilder.consume" in (queen_sync.Consumer.__doc__ or "")
