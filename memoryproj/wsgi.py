"""WSGI entry point of the demo project (``gunicorn memoryproj.wsgi``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from memoryproj import bodies, logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryproj.settings")
# NOTE: the server's access log without query strings and owner ids (memoryproj/logs.py).
logs.install()

# NOTE: request bodies capped before Django reads them (memoryproj/bodies.py).
application = bodies.CappedWSGI(get_wsgi_application())
