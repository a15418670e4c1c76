"""Django app config of ``queen_sync.contrib.django`` (label ``queen_sync``)."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed

from . import SETTING_NAME, close_client, queen_settings

log = logging.getLogger("queen_sync.contrib.django")


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        queen_settings()  # a bad override fails where it is made
        unsent = close_client()
        if unsent:
            log.error("settings.%s changed: %d buffered message(s) of the old client not delivered", SETTING_NAME, unsent)


class QueenSyncConfig(AppConfig):
    """Validates ``settings.QUEEN`` at startup (raising ``QueenConfigurationError``) and drops
    the shared client when the setting changes (``override_settings``). Makes no connection."""

    name = "queen_sync.contrib.django"
    label = "queen_sync"
    verbose_name = "Queen MQ"
    default = True

    def ready(self) -> None:
        queen_settings()
        setting_changed.connect(_on_setting_changed, dispatch_uid="queen_sync.contrib.django.setting_changed")
