"""The response renderer of the API: DRF's JSON, written by orjson where that is the same JSON."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework import renderers


def _drf_only(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is DRF's to write")


# NOTE: what orjson does not write as DRF's encoder does goes to ``default``, which hands it
# back to DRF: a datetime (DRF cuts microseconds to milliseconds and writes "Z"), a dataclass,
# and subclasses of str, int, dict and list (DRF's ErrorDetail, lazy strings).
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, written by orjson where that writes the same JSON: compact, UTF-8,
    U+2028 and U+2029 escaped as DRF escapes them. Anything else (an ``indent`` asked for,
    DRF's ASCII or spaced settings, a value orjson would write otherwise, an integer past 64
    bits) is rendered by DRF itself.

    NOTE: a turn page or a long context is megabytes of JSON: DRF's encoder took about 35 ms
    for 6 MB, holding the interpreter's lock against every other request of the process
    (``health/`` included), orjson takes 5-8 ms (issue 23, finding 3). A float may be written
    in another exponent form (``1e16`` for ``1e+16``), the same JSON number.
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
        # NOTE: their lead byte first, which memchr finds: for 6 MB with none of it that is 0.06
        # ms, where the two searches alone take 7 ms with the interpreter's lock held (issue 23).
        if b"\xe2" in body and (b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body):
            body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return body
