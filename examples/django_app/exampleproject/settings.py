"""Minimal settings of the example project (no database needed)."""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "queen_sync.contrib.django",
    "orders",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "exampleproject.urls"
WSGI_APPLICATION = "exampleproject.wsgi.application"
DATABASES = {}
USE_TZ = True

# queen_sync.contrib.django reads this dict; without "URL"/"URLS" the client reads QUEEN_URL.
QUEEN = {
    "URL": os.environ.get("QUEEN_URL", "http://127.0.0.1:6632"),
    "TIMEOUT_MILLIS": 10000,
    "BEARER_TOKEN": os.environ.get("QUEEN_BEARER_TOKEN") or None,
}

# The queue the orders app pushes to and its consumer reads.
ORDERS_QUEUE = os.environ.get("ORDERS_QUEUE", "orders")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"queen_sync": {"handlers": ["console"], "level": "INFO"}, "orders": {"handlers": ["console"], "level": "INFO"}},
}
