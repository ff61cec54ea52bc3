"""The demo chat page (``/chat/``): talk to the assistant and see the context it answered from.

A visitor who has not logged in talks as an anonymous owner bound to their browser session,
made with their first message (a bare visit stores nothing) and bounded by
``memoryproj.anonymous`` (throttles, caps, retention); a logged-in user talks as themselves,
and logging in links the anonymous memory into theirs.
Only service callers may pick another user id. The page posts to ``chat`` (server-rendered,
works without JavaScript) or, with JavaScript, reads the reply as it is produced from
``chat_stream`` (an async view: streamed under an ASGI server such as uvicorn).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from memory import permissions, selectors, services
from memory.exceptions import (
    IdempotencyKeyReused,
    MemoryException,
    MemoryUnavailable,
    database_guard,
)
from memory.integrations.channels import reply_chunks
from memory.models import Role, Turn
from memory.payloads import ContextPayload, FactPayload, TurnPayload, turn_payload
from memory.validators import validate_content, validate_owner_id, validate_session_id
from memoryproj import anonymous, logins
from memoryproj.anonymous import ANON_SESSION_KEY, session_anon_id
from memoryproj.responders import responder_get
from memoryproj.tasks import ANON_PREFIX

logger = logging.getLogger(__name__)

EXCHANGE_ID_RE = r"^[A-Za-z0-9_-]{8,64}$"
DEFAULT_SESSION_ID = "web"
# Where the page's websocket is served under ASGI (memoryproj/asgi.py, memoryproj/sockets.py).
SOCKET_PATH = "/ws/chat/"
UNAVAILABLE = "The memory database is unavailable; try again."


class PickForm(forms.Form):
    """Which session label the turns get, and (service callers only) whose memory."""

    user_id = forms.CharField(
        label="User id", max_length=128, required=False, validators=[validate_owner_id]
    )
    session_id = forms.CharField(
        label="Session id", max_length=128, validators=[validate_session_id]
    )


class MessageForm(PickForm):
    """One message; ``exchange_id`` makes a resubmitted form store nothing twice."""

    message = forms.CharField(label="Message", validators=[validate_content])
    exchange_id = forms.RegexField(regex=EXCHANGE_ID_RE, widget=forms.HiddenInput)


@dataclass(frozen=True)
class Speaker:
    """Whose memory the visitor talks as, and whether they may pick another one; ``owner_id`` is
    ``None`` for an anonymous visitor who has not sent a message yet (there is none yet)."""

    owner_id: str | None
    anonymous: bool
    can_pick: bool


@dataclass(frozen=True)
class Exchange:
    """One message and its reply: the context the reply was computed from, and the reply."""

    context: ContextPayload
    reply: Turn


def anon_owner_id(request: HttpRequest) -> str:
    """The visitor's anonymous owner id, made (``anon-`` and 128 random bits) on first use: the
    first message. Making one starts the visitor's session (its row and cookie) and, at most
    hourly per process, the retention sweep's task."""
    owner_id = session_anon_id(request)
    if owner_id is None:
        owner_id = f"{ANON_PREFIX}{secrets.token_hex(16)}"
        request.session[ANON_SESSION_KEY] = owner_id
        anonymous.sweep_due()
    return owner_id


def anon_link(request: HttpRequest) -> int:
    """Link the memory this browser session made anonymously into the logged-in user's; return
    how many turns moved (0 when there was nothing, or nobody is logged in).

    The session forgets its anonymous id only once the link committed, so a link that failed
    (``MemoryUnavailable``, raised) is tried again on the next page; a link refused for good
    (``ValidationError``: past ``MAX_FACTS``) is logged and not tried again.
    """
    anon = request.session.get(ANON_SESSION_KEY)
    owner_id = permissions.owner_id_for(request.user) if request.user.is_authenticated else None
    if not isinstance(anon, str) or owner_id is None:
        return 0
    try:
        result = services.memory_link(owner_id=owner_id, from_owner_id=anon)
    except ValidationError as e:
        # NOTE: e.g. the user's facts and the anonymous ones together pass MEMORY["MAX_FACTS"]:
        # the link is refused whole and would be every time; the user goes on as themselves.
        logger.warning("The anonymous memory of a session was not linked: %s", " ".join(e.messages))
        del request.session[ANON_SESSION_KEY]
        return 0
    del request.session[ANON_SESSION_KEY]
    return result.turns_moved


def speaker_get(request: HttpRequest, picked: str | None, *, create: bool = False) -> Speaker:
    """Whose memory this request talks as: a logged-in user's own (their anonymous memory
    linked in first), the visitor's anonymous one, or ``picked`` for a service caller. An
    anonymous visitor's owner is made only with ``create`` (a message to store); without, a
    visitor who has none talks as ``None`` and nothing is written, not even a session.

    Raises ``Http404`` for a ``picked`` id the visitor may not reach (as the API answers: a
    stranger learns nothing), or for a logged-in user the owner mapping gives no id;
    ``MemoryUnavailable`` when the link cannot reach the database.
    """
    user = request.user
    if not user.is_authenticated:
        own = session_anon_id(request)
        if picked and picked != own:
            raise Http404
        if own is None and create:
            own = anon_owner_id(request)
        return Speaker(owner_id=own, anonymous=True, can_pick=False)
    anon_link(request)
    service = permissions.is_service_caller(user)
    own_id = permissions.owner_id_for(user)
    owner_id = picked or own_id
    if owner_id is None or (owner_id != own_id and not service):
        raise Http404
    return Speaker(owner_id=owner_id, anonymous=False, can_pick=service)


def exchange_open(
    *, owner_id: str, session_id: str, message: str, exchange_id: str
) -> ContextPayload:
    """Store the user's message (fact extraction runs there) and read the context after it.

    Idempotent per ``exchange_id``. Raises ``ValidationError`` for bad input and
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    services.turn_append(
        owner_id=owner_id,
        session_id=session_id,
        role=Role.USER.value,
        content=message,
        idempotency_key=f"chat-{exchange_id}-user",
    )
    return selectors.context_get(owner_id=owner_id)


async def aexchange_open(
    *, owner_id: str, session_id: str, message: str, exchange_id: str
) -> tuple[ContextPayload, Turn]:
    """``exchange_open`` on the app's async API (``services.aturn_append``, then
    ``selectors.acontext_get``: a warm context is read with no thread hop); with the user's
    stored turn, whose ``seq`` the streaming page shows at once."""
    turn = await services.aturn_append(
        owner_id=owner_id,
        session_id=session_id,
        role=Role.USER.value,
        content=message,
        idempotency_key=f"chat-{exchange_id}-user",
    )
    return await selectors.acontext_get(owner_id=owner_id), turn


async def aexchange_close(
    *, owner_id: str, session_id: str, content: str, context: ContextPayload, exchange_id: str
) -> Turn:
    """``exchange_close`` on the app's async API (``services.aturn_append``)."""
    try:
        return await services.aturn_append(
            **_reply(owner_id, session_id, content, context, exchange_id)
        )
    except IdempotencyKeyReused as e:
        first: Turn = e.turn
        return first


def exchange_close(
    *, owner_id: str, session_id: str, content: str, context: ContextPayload, exchange_id: str
) -> Turn:
    """Store the assistant's reply ``content``, computed from ``context``; idempotent per
    ``exchange_id``, errors as ``exchange_open``."""
    try:
        return services.turn_append(**_reply(owner_id, session_id, content, context, exchange_id))
    except IdempotencyKeyReused as e:
        # NOTE: a resubmitted exchange: the responder answered from a context that now holds
        # this exchange too, so its reply differs; the reply first stored stands.
        first: Turn = e.turn
        return first


def _reply(
    owner_id: str, session_id: str, content: str, context: ContextPayload, exchange_id: str
) -> dict[str, Any]:
    """The ``turn_append`` arguments of an exchange's reply turn."""
    return {
        "owner_id": owner_id,
        "session_id": session_id,
        "role": Role.ASSISTANT.value,
        "content": content,
        "metadata": {"demo": "chat", "context_source": context["source"]},
        "idempotency_key": f"chat-{exchange_id}-assistant",
    }


def chat_exchange(*, owner_id: str, session_id: str, message: str, exchange_id: str) -> Exchange:
    """Store the user's message, read the context, let the responder answer from it, and store
    the answer.

    Each turn's idempotency key derives from ``exchange_id``: a resubmitted exchange stores
    nothing new and returns the reply first stored. Raises ``ValidationError`` for bad input
    and ``MemoryUnavailable`` when the database cannot be reached.
    """
    context = exchange_open(
        owner_id=owner_id, session_id=session_id, message=message, exchange_id=exchange_id
    )
    reply = exchange_close(
        owner_id=owner_id,
        session_id=session_id,
        content=responder_get().respond(context=context, message=message),
        context=context,
        exchange_id=exchange_id,
    )
    return Exchange(context=context, reply=reply)


def _fact_rows(facts: dict[str, Any], sessions: dict[str, str]) -> list[tuple[str, str, str]]:
    """``(key, value as text, the session it came from or "")`` for each fact, by key."""
    return [
        (key, _fact_text(value), sessions.get(key) or "") for key, value in sorted(facts.items())
    ]


def _fact_text(value: Any) -> str:
    """A value as a reader would write it: a string as it is, a list of strings (``likes``)
    joined by commas, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    return json.dumps(value, ensure_ascii=False)


def _fact_sessions(facts: list[FactPayload]) -> dict[str, str]:
    return {fact["key"]: fact["session_id"] or "" for fact in facts}


def fact_sessions_get(*, owner_id: str) -> dict[str, str]:
    """The session each of the owner's facts came from, by key (through the cached copy, as
    the context); empty when the database cannot be reached, for a page that shows them."""
    try:
        return _fact_sessions(selectors.fact_list(owner_id=owner_id))
    except MemoryUnavailable:
        return {}


async def afact_sessions_get(*, owner_id: str) -> dict[str, str]:
    """``fact_sessions_get`` on the app's async API (``selectors.afact_list``)."""
    try:
        return _fact_sessions(await selectors.afact_list(owner_id=owner_id))
    except MemoryUnavailable:
        return {}


# The budget of the window the chat page shows beside a reply: what a small model would take.
WINDOW_TOKENS = 600


def window_get(*, owner_id: str, message: str) -> dict[str, Any] | None:
    """How the reply's context looks as model messages within ``WINDOW_TOKENS`` with ``message``
    as the query: whether it carries the summary, and which older turns it recalls; ``None``
    where it cannot be read (the page shows the rest)."""
    try:
        messages = selectors.context_messages(
            owner_id=owner_id, max_tokens=WINDOW_TOKENS, query=message[:200]
        )
    except Exception:
        logger.warning("The chat page's window could not be read.", exc_info=True)
        return None
    return {
        "budget": WINDOW_TOKENS,
        "summary_through_seq": messages["summary_through_seq"],
        "recalled": messages["recalled"],
    }


def _page(
    request: HttpRequest,
    form: forms.Form,
    *,
    speaker: Speaker | None = None,
    context: ContextPayload | None = None,
    reply: TurnPayload | None = None,
    error: str | None = None,
    status: int = 200,
    retry_after: int | None = None,
) -> HttpResponse:
    """The page: who is talking, the session form, the conversation, the message box and the
    context panel; with ``retry_after``, a ``Retry-After`` header (a 429)."""
    # NOTE: the fields that passed validation, even when another did not (an empty message).
    cleaned = getattr(form, "cleaned_data", {}) if form.is_bound else {}
    if context is None and speaker is not None and speaker.owner_id is None:
        # NOTE: a visitor with no memory yet: nothing was read, and the page says so.
        context = {"user_id": "", "facts": {}, "turns": [], "source": "database"}
    turns: list[TurnPayload] = list(context["turns"]) if context else []
    if reply is not None:
        turns.append(reply)
    response = render(
        request,
        "memoryproj/chat.html",
        {
            "form": form,
            "speaker": speaker,
            "picked_user_id": cleaned.get("user_id") or "",
            "session_id": cleaned.get("session_id", form.data.get("session_id", "")),
            "session_ok": "session_id" in cleaned,
            "message": form.data.get("message", "") if reply is None else "",
            "context": context,
            "facts": _fact_rows(
                context["facts"],
                fact_sessions_get(owner_id=context["user_id"]) if context["facts"] else {},
            )
            if context
            else [],
            "turns": turns,
            "reply": reply,
            "window": window_get(owner_id=context["user_id"], message=form.data.get("message", ""))
            if reply is not None and context and context["user_id"] and form.data.get("message")
            else None,
            "error": error,
            "exchange_id": secrets.token_urlsafe(16),
            # NOTE: under ASGI the page talks over the websocket once the visitor has a memory
            # (an anonymous visitor's first message makes it, over HTTP).
            "socket_path": SOCKET_PATH if getattr(settings, "SERVED_BY_ASGI", False) else "",
        },
        status=status,
    )
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _throttled_text(wait: int) -> str:
    return f"Too many messages; try again in {wait} s, or log in."


def _speaker_or_none(request: HttpRequest) -> Speaker | None:
    """Who the visitor is, for a page that shows an input error: never raises."""
    try:
        return speaker_get(request, None)
    except (Http404, MemoryUnavailable):
        return None


@never_cache
@require_http_methods(["GET", "POST"])
def chat(request: HttpRequest) -> HttpResponse:
    """GET ``?session_id=``: the visitor's memory now; POST a message: the reply, and the
    context it was computed from. ``user_id`` picks another owner, for service callers only
    (``memory.permissions``); any other visitor gets a 404 for an id not their own.

    An anonymous visitor's GET writes nothing (no session, no owner); their messages are
    throttled (429 with ``Retry-After``) and capped (403: log in to go on) by
    ``memoryproj.anonymous``, before anything is stored.
    """
    if request.method == "POST":
        form: PickForm = MessageForm(request.POST)
    else:
        query = request.GET.copy()
        query.setdefault("session_id", DEFAULT_SESSION_ID)
        form = PickForm(query)
    if not form.is_valid():
        return _page(request, form, speaker=_speaker_or_none(request), status=400)
    data = form.cleaned_data
    posting = isinstance(form, MessageForm)
    wait = anonymous.throttle_wait(request) if posting else None
    if wait is not None:
        speaker = _speaker_or_none(request)
        error = _throttled_text(wait)
        return _page(request, form, speaker=speaker, error=error, status=429, retry_after=wait)
    try:
        speaker = speaker_get(request, data.get("user_id") or None, create=posting)
    except MemoryUnavailable:
        return _page(request, form, error=UNAVAILABLE, status=503)
    try:
        if posting and speaker.anonymous:
            assert speaker.owner_id is not None
            full = anonymous.room_refusal(owner_id=speaker.owner_id, message=data["message"])
            if full is not None:
                context = selectors.context_get(owner_id=speaker.owner_id)
                return _page(
                    request, form, speaker=speaker, context=context, error=full, status=403
                )
        if posting:
            assert speaker.owner_id is not None
            exchange = chat_exchange(
                owner_id=speaker.owner_id,
                session_id=data["session_id"],
                message=data["message"],
                exchange_id=data["exchange_id"],
            )
            return _page(
                request,
                form,
                speaker=speaker,
                context=exchange.context,
                reply=turn_payload(exchange.reply),
            )
        if speaker.owner_id is None:
            return _page(request, form, speaker=speaker)
        context = selectors.context_get(owner_id=speaker.owner_id)
        return _page(request, form, speaker=speaker, context=context)
    except ValidationError as e:
        return _page(request, form, speaker=speaker, error=" ".join(e.messages), status=400)
    except MemoryUnavailable:
        return _page(request, form, speaker=speaker, error=UNAVAILABLE, status=503)
    except MemoryException as e:
        return _page(request, form, speaker=speaker, error=str(e), status=409)


def _event(kind: str, **data: Any) -> bytes:
    """One line of the stream: a JSON object with its ``event`` name."""
    return json.dumps({"event": kind, **data}, ensure_ascii=False).encode() + b"\n"


async def _reply_events(
    *,
    owner_id: str,
    session_id: str,
    message: str,
    exchange_id: str,
    context: ContextPayload,
    sent: Turn,
) -> AsyncIterator[bytes]:
    """The stream of one exchange: the context (with the user's stored turn ``sent``), the
    reply chunk by chunk as the responder produces it, then the stored reply turn (or an
    error, once the stream has begun)."""
    sessions = await afact_sessions_get(owner_id=owner_id) if context["facts"] else {}
    yield _event(
        "context",
        user_id=owner_id,
        facts=[
            {"key": key, "value": text, "session_id": session}
            for key, text, session in _fact_rows(context["facts"], sessions)
        ],
        source=context["source"],
        turns=len(context["turns"]),
        sent=turn_payload(sent),
    )
    chunks: list[str] = []
    try:
        async for chunk in reply_chunks(responder_get(), context=context, message=message):
            chunks.append(chunk)
            yield _event("delta", text=chunk)
    except Exception:
        # NOTE: the status line went out with the first line: end the stream with an error
        # the page shows, and log the traceback as a 500 would be.
        # The owner id stays out of the log, as out of the admin's.
        logger.exception("The responder failed while streaming a reply")
        yield _event("error", detail="The assistant failed to answer; try again.")
        return
    try:
        reply = await aexchange_close(
            owner_id=owner_id,
            session_id=session_id,
            content="".join(chunks),
            context=context,
            exchange_id=exchange_id,
        )
    except ValidationError as e:
        yield _event("error", detail=" ".join(e.messages))
        return
    except MemoryUnavailable:
        yield _event("error", detail=UNAVAILABLE)
        return
    except MemoryException as e:
        # NOTE: e.g. a resubmitted exchange whose new reply differs from the one stored.
        yield _event("error", detail=str(e))
        return
    yield _event("done", turn=turn_payload(reply), exchange_id=secrets.token_urlsafe(16))


@never_cache
@require_POST
async def chat_stream(request: HttpRequest) -> HttpResponseBase:
    """POST a message (the page's form fields): the reply streamed as it is produced, one JSON
    object a line (``application/x-ndjson``): ``context``, then ``delta`` chunks, then
    ``done`` with the stored turn and the next ``exchange_id``. Under an ASGI server each line
    is sent as it is produced; under WSGI the same lines come in one body at the end.

    Bad input is a 400 and a lost database a 503, both ``{"detail": ...}``, before anything is
    streamed; a 404 for an owner the visitor may not reach, as ``chat``; for an anonymous
    visitor, a 429 (with ``Retry-After``) past a throttle and a 403 past a cap, as ``chat``.
    A failure after the stream began ends it with an ``error`` line; the user's turn is then
    stored without reply.
    """
    form = MessageForm(request.POST)
    if not form.is_valid():
        errors = [f"{field}: {m}" for field, ms in form.errors.items() for m in ms]
        return JsonResponse({"detail": "; ".join(errors)}, status=400)
    data = form.cleaned_data
    # NOTE: the throttles read the session and the cache, sync objects: in a thread.
    wait = await sync_to_async(anonymous.throttle_wait)(request)
    if wait is not None:
        response = JsonResponse({"detail": _throttled_text(wait)}, status=429)
        response["Retry-After"] = str(wait)
        return response
    try:
        # NOTE: the session and the user are sync (database) objects: resolve them in a thread;
        # a lost database there is the same 503 as in the memory calls after it.
        with database_guard():
            speaker = await sync_to_async(speaker_get)(
                request, data.get("user_id") or None, create=True
            )
            assert speaker.owner_id is not None
            if speaker.anonymous:
                full = await sync_to_async(anonymous.room_refusal)(
                    owner_id=speaker.owner_id, message=data["message"]
                )
                if full is not None:
                    return JsonResponse({"detail": full}, status=403)
        context, sent = await aexchange_open(
            owner_id=speaker.owner_id,
            session_id=data["session_id"],
            message=data["message"],
            exchange_id=data["exchange_id"],
        )
    except ValidationError as e:
        return JsonResponse({"detail": " ".join(e.messages)}, status=400)
    except MemoryUnavailable:
        return JsonResponse({"detail": UNAVAILABLE}, status=503)
    events = _reply_events(
        owner_id=speaker.owner_id,
        session_id=data["session_id"],
        message=data["message"],
        exchange_id=data["exchange_id"],
        context=context,
        sent=sent,
    )
    content_type = "application/x-ndjson; charset=utf-8"
    if not isinstance(request, ASGIRequest):
        # NOTE: a WSGI server cannot send an async iterator as it goes (Django would gather it
        # with a warning): the same lines, gathered here, in one body.
        return HttpResponse(b"".join([event async for event in events]), content_type=content_type)
    streamed = StreamingHttpResponse(events, content_type=content_type)
    # NOTE: a proxy such as nginx would otherwise buffer the whole reply.
    streamed["X-Accel-Buffering"] = "no"
    return streamed


class LoginView(auth_views.LoginView):
    """Django's login page; on success the visitor's anonymous memory joins theirs. Past
    ``MEMORYPROJ_LOGIN_THROTTLE`` failed logins of one username from one client, a 429 with
    ``Retry-After``, without a password checked (``memoryproj.logins``)."""

    template_name = "memoryproj/login.html"

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        wait = logins.login_wait(request, username)
        if not wait:
            return super().post(request, *args, **kwargs)
        # NOTE: an unbound form: a bound one would authenticate as soon as its errors are read.
        form = self.get_form_class()(request, initial={"username": username[:150]})
        minutes = math.ceil(wait / 60)
        response = self.render_to_response(
            self.get_context_data(
                form=form,
                throttled=f"Too many failed logins; try again in {minutes} minute(s).",
            ),
            status=429,
        )
        response["Retry-After"] = str(wait)
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        logins.login_failed(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        logins.login_cleared(self.request, self.request.POST.get("username", ""))
        response = super().form_valid(form)
        # NOTE: should the link fail, the anonymous id stays in the session and the chat page
        # links it on the next visit.
        with contextlib.suppress(MemoryUnavailable):
            anon_link(self.request)
        return response
