"""Framework integrations for queen_sync.

- :mod:`queen_sync.contrib.flask`: a Flask extension (extra ``flask``).
- :mod:`queen_sync.contrib.django`: a Django app with a ``queen_consume`` management
  command (extra ``django``).

Install an extra from a checkout with ``pip install '.[flask]'`` (or ``'.[django]'``), or
``pip install 'queen-sync[flask]'`` once queen-sync is published on an index.

Importing ``queen_sync`` or this package imports neither framework; only importing one of
the submodules above does.
"""

from ._shared import CLIENT_OPTIONS, ProcessClient, client_options

__all__ = ["CLIENT_OPTIONS", "ProcessClient", "client_options"]
