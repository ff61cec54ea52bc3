"""The demo chat page (``/chat/``): pick a user id and a session id, talk to the assistant, and see
the context it answered from. Server-rendered over the app's services and selectors; open to
anyone only while ``DEBUG`` is on (see ``chat``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from memory import permissions, selectors, services
from memory.exceptions import IdempotencyKeyReused, MemoryUnavailable
from memory.models import Role, Turn
from memory.payloads import ContextPayload, TurnPayload, turn_payload
from memory.validators import validate_content, validate_owner_id, validate_session_id
from memoryproj.responders import responder_get

EXCHANGE_ID_RE = r"^[A-Za-z0-9_-]{8,64}$"


class PickForm(forms.Form):
    """Whose memory, and which session label the turns get."""

    user_id = forms.CharField(label="User id", max_length=128, validators=[validate_owner_id])
    session_id = forms.CharField(
        label="Session id", max_length=128, validators=[validate_session_id]
    )


class MessageForm(PickForm):
    """One message; ``exchange_id`` makes a resubmitted form store nothing twice."""

    message = forms.CharField(label="Message", validators=[validate_content])
    exchange_id = forms.RegexField(regex=EXCHANGE_ID_RE, widget=forms.HiddenInput)


@dataclass(frozen=True)
class Exchange:
    """One message and its reply: the context the reply was computed from, and the reply."""

    context: ContextPayload
    reply: Turn


def chat_exchange(*, owner_id: str, session_id: str, message: str, exchange_id: str) -> Exchange:
    """Store the user's message (fact extraction runs there), read the context, let the
    responder answer from it, and store the answer.

    Each turn's idempotency key derives from ``exchange_id``: a resubmitted exchange stores
    nothing new and returns the reply first stored. Raises ``ValidationError`` for bad input
    and ``MemoryUnavailable`` when the database cannot be reached.
    """
    services.turn_append(
        owner_id=owner_id,
        session_id=session_id,
        role=Role.USER.value,
        content=message,
        idempotency_key=f"chat-{exchange_id}-user",
    )
    context = selectors.context_get(owner_id=owner_id)
    try:
        reply = services.turn_append(
            owner_id=owner_id,
            session_id=session_id,
            role=Role.ASSISTANT.value,
            content=responder_get().respond(context=context, message=message),
            metadata={"demo": "chat", "context_source": context["source"]},
            idempotency_key=f"chat-{exchange_id}-assistant",
        )
    except IdempotencyKeyReused as e:
        # NOTE: a resubmitted exchange: the responder answered from a context that now holds
        # this exchange too, so its reply differs; the reply first stored stands.
        reply = e.turn
    return Exchange(context=context, reply=reply)


def _fact_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for key, value in sorted(facts.items())
    ]


def _page(
    request: HttpRequest,
    form: forms.Form,
    *,
    context: ContextPayload | None = None,
    reply: TurnPayload | None = None,
    error: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page: the pick form, the conversation, the message box and the context panel."""
    # NOTE: the fields that passed validation, even when another did not (an empty message).
    cleaned = getattr(form, "cleaned_data", {}) if form.is_bound else {}
    turns: list[TurnPayload] = list(context["turns"]) if context else []
    if reply is not None:
        turns.append(reply)
    return render(
        request,
        "memoryproj/chat.html",
        {
            "form": form,
            "user_id": cleaned.get("user_id", form.data.get("user_id", "")),
            "session_id": cleaned.get("session_id", form.data.get("session_id", "")),
            "picked": "user_id" in cleaned and "session_id" in cleaned,
            "message": form.data.get("message", "") if reply is None else "",
            "context": context,
            "facts": _fact_rows(context["facts"]) if context else [],
            "turns": turns,
            "reply": reply,
            "error": error,
            "exchange_id": secrets.token_urlsafe(16),
        },
        status=status,
    )


def _check_access(request: HttpRequest, owner_id: str) -> None:
    if not settings.DEBUG and not permissions.can_reach(request.user, owner_id):
        # NOTE: 404, as the API answers: the page reveals nothing about other users.
        raise Http404


@never_cache
@require_http_methods(["GET", "POST"])
def chat(request: HttpRequest) -> HttpResponse:
    """GET ``?user_id=&session_id=``: the user's memory now; POST a message: the reply, and the
    context it was computed from.

    While ``DEBUG`` is on (a demo on localhost), anyone may pick any user id. Otherwise the
    visitor logs in first (through the admin's login page) and may pick only the user ids the
    memory API lets them reach (``memory.permissions.can_reach``: their own, or every id for
    staff); any other id is a 404.
    """
    if not settings.DEBUG and not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path(), reverse("admin:login"))
    form = MessageForm(request.POST) if request.method == "POST" else PickForm(request.GET or None)
    if not form.is_bound:
        return _page(request, form)
    if not form.is_valid():
        return _page(request, form, status=400)
    data = form.cleaned_data
    _check_access(request, data["user_id"])
    try:
        if isinstance(form, MessageForm):
            exchange = chat_exchange(
                owner_id=data["user_id"],
                session_id=data["session_id"],
                message=data["message"],
                exchange_id=data["exchange_id"],
            )
            return _page(
                request, form, context=exchange.context, reply=turn_payload(exchange.reply)
            )
        return _page(request, form, context=selectors.context_get(owner_id=data["user_id"]))
    except ValidationError as e:
        return _page(request, form, error=" ".join(e.messages), status=400)
    except MemoryUnavailable:
        return _page(
            request, form, error="The memory database is unavailable; try again.", status=503
        )
