"""The request parser of the API: DRF's JSON parser, with a body nested too deep a 400."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser; a body nested too deep for Python's parser is a 400 as well."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as e:
            raise exceptions.ParseError("JSON parse error - nested too deep.") from e
