"""The consumer's logger and how its log lines name messages.

Everything the consumer logs goes to the ``queen_sync.consumer`` logger (whichever module of
the package logs it). Log lines name messages by their ids (transactionId, partition,
lease), at most :data:`MAX_IDS_LOGGED` of them, never by payload.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

log = logging.getLogger("queen_sync.consumer")

#: Most message ids one log line lists ("... and N more" after them).
MAX_IDS_LOGGED = 10


def ids(msgs: List[Dict[str, Any]]) -> str:
    """``"txid (partition p, lease l), ..."`` for the first :data:`MAX_IDS_LOGGED` messages."""
    shown = ", ".join(
        "%s (partition %s, lease %s)" % (m.get("transactionId"), m.get("partition") or m.get("partitionId"), m.get("leaseId"))
        for m in msgs[:MAX_IDS_LOGGED]
    )
    if len(msgs) > MAX_IDS_LOGGED:
        shown += " and %d more" % (len(msgs) - MAX_IDS_LOGGED)
    return shown


def more(n: int) -> str:
    """The ``" and N more"`` tail of a list cut at :data:`MAX_IDS_LOGGED` items of ``n``."""
    return " and %d more" % (n - MAX_IDS_LOGGED) if n > MAX_IDS_LOGGED else ""
