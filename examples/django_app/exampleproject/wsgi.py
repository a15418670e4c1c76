"""WSGI entry point: ``python -m gunicorn exampleproject.wsgi`` (from examples/django_app)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exampleproject.settings")
application = get_wsgi_application()
