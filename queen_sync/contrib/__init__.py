"""Framework integrations for queen_sync.

- :mod:`queen_sync.contrib.flask`: a Flask extension (``pip install queen-sync[flask]``).
- :mod:`queen_sync.contrib.django`: a Django app with a ``queen_consume`` management
  command (``pip install queen-sync[django]``).

Importing ``queen_sync`` or this package imports neither framework; only importing one of
the submodules above does.
"""

from ._shared import CLIENT_OPTIONS, ProcessClient, client_options

__all__ = ["CLIENT_OPTIONS", "ProcessClient", "client_options"]
