"""ASGI entry point of the demo project (``uvicorn memoryproj.asgi:application``, ``make
run-asgi``): the same project as under WSGI, with the chat page's replies streamed, the chat
over a websocket at ``ws/chat/`` (Django Channels: Origin checked against ``ALLOWED_HOSTS``,
the user from the session), and the memory's tools over MCP (Streamable HTTP) at ``/mcp/``."""

from __future__ import annotations

import os
import sys
import warnings

from django.core.asgi import get_asgi_application

from memory.asgi import HealthFastPath
from memoryproj import bodies, logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryproj.settings")
# NOTE: read by the settings, which load below: served under ASGI, the project pools its
# database connections (memoryproj/settings.py, DATABASE_POOL_SIZE).
os.environ["MEMORYPROJ_ASGI"] = "1"
# NOTE: the server's access log without query strings and owner ids (memoryproj/logs.py).
logs.install()
# NOTE: the event loop takes the interpreter's lock at each step of a request it serves (health/
# on the loop itself, every request's start and end), and waits up to this long for a thread
# running Python to hand it over: 5 ms by default, health/'s p99 200-270 ms under the heaviest
# reads on a slow 2-core machine (tests/test_load.py), 58-92 ms at 1 ms.
sys.setswitchinterval(0.001)

# NOTE: WhiteNoise's sync file iterators are fine for static files; silence Django's warning.
warnings.filterwarnings(
    "ignore",
    message="StreamingHttpResponse must consume synchronous iterators",
    module="django.core.handlers.asgi",
)

django_application = get_asgi_application()

# NOTE: imported once Django is set up (get_asgi_application above): it reads the app's models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from memory.integrations.mcp import mcp_mount  # noqa: E402
from memoryproj.sockets import ChatConsumer  # noqa: E402

# NOTE: bodies capped before Django reads them (memoryproj/bodies.py); health/ answered on the event
# loop (memory/asgi.py). The stubs' scope and message types differ from asgiref's; the same objects
# at run time.
http_application = bodies.CappedASGI(
    HealthFastPath(mcp_mount(django_application, path="/mcp/"))  # type: ignore[arg-type]
)
# NOTE: a socket from a page of another site is refused before it opens (its Origin header must
# name one of ALLOWED_HOSTS); the user and the anonymous visitor's session come from the cookie.
websocket_application = AllowedHostsOriginValidator(
    AuthMiddlewareStack(URLRouter([path("ws/chat/", ChatConsumer.as_asgi())]))
)
application = ProtocolTypeRouter(
    {"http": http_application, "websocket": websocket_application, "lifespan": http_application}
)
