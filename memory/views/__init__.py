"""The HTTP API: one thin ``APIView`` per URL over the services and selectors, one module per
entity (``turns``, ``context``, ``facts``, ``sessions``, ``users``, ``health``, ``tools``), whose
name is its operations' OpenAPI tag and whose ``urlpatterns`` are its URLs; in ``base`` the app's
base view; ``exceptions`` maps domain and database errors to statuses (412,
404, 413, 422, 503), beside ``parsers``, ``renderers`` and ``schema``.

Selectors already return the contract's dicts, so views hand them to ``Response`` as they are;
the output serializers only describe them in the OpenAPI schema. A site mounts them with
``include("memory.urls")``: no name here is imported by a host.
"""
