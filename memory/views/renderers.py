"""The response renderer of the API: DRF's JSON, written by orjson where that is the same JSON."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework import renderers


def _drf_only(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is DRF's to write")


# NOTE: what orjson would write otherwise goes to ``default``, back to DRF: datetimes (DRF writes
# milliseconds and "Z"), dataclasses, subclasses of str, int, dict and list (ErrorDetail).
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, written by orjson where that writes the same JSON: compact, UTF-8,
    U+2028 and U+2029 escaped as DRF escapes them. Anything else (``indent``, DRF's ASCII or
    spaced settings, an integer past 64 bits) is rendered by DRF itself.

    NOTE: a long page is megabytes of JSON: DRF's encoder held the interpreter's lock 35 ms for 6
    MB, orjson 5-8 ms (docs/performance.md). A float may take another exponent form, the same
    number.
    """

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        if data is None:
            return b""
        # DRF's get_indent takes None, which its own render passes; the stubs say str.
        indent = self.get_indent(accepted_media_type, renderer_context or {})  # type: ignore[arg-type]
        if self.ensure_ascii or not self.compact or indent is not None:
            return super().render(data, accepted_media_type, renderer_context)
        try:
            body = orjson.dumps(data, default=_drf_only, option=_ORJSON_OPTIONS)
        except TypeError:
            return super().render(data, accepted_media_type, renderer_context)
        # NOTE: their lead byte first, which memchr finds in 0.06 ms for 6 MB; the two searches take
        # 7.
        if b"\xe2" in body and (b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body):
            body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return body
