"""Loading an export document (``selectors.owner_export``'s) into an owner with no memory yet:
every item checked by the API's own rules first, then one transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError
from django.db.models import JSONField, Value

from memory import aio, cache, codec
from memory.conf import conf
from memory.models import ROLES, Fact, FactVersion, Owner, Role, Session, Summary, Turn
from memory.payloads import (
    FACT_FIELDS,
    FACT_VERSION_FIELDS,
    SESSION_FIELDS,
    SUMMARY_FIELDS,
    TURN_FIELDS,
)
from memory.selectors.export import EXPORT_FORMAT, EXPORT_VERSION
from memory.services.common import owner_lock, service_transaction
from memory.services.embedding_triggers import embedding_due
from memory.validators import (
    validate_actor,
    validate_content,
    validate_fact_key,
    validate_json_value,
    validate_metadata,
    validate_owner_id,
    validate_session_id,
)

# Errors named before a refusal stops looking: enough to fix a document, bounded for any.
MAX_ERRORS = 20
# Rows per INSERT.
BATCH_ROWS = 1000

FIELDS = {
    "document": (
        "format",
        "version",
        "user_id",
        "exported_at",
        "facts",
        "fact_history",
        "turns",
        "sessions",
        "summary",
    ),
    "facts": FACT_FIELDS,
    "fact_history": FACT_VERSION_FIELDS,
    "turns": TURN_FIELDS,
    "sessions": SESSION_FIELDS,
}
# Fields an item may lack (older documents): a fact's ``expires_at`` (never expires) and a version's
# ``actor`` (``"import"``).
OPTIONAL = {"facts": ("expires_at",), "fact_history": ("actor", "expires_at")}


class ImportResult(NamedTuple):
    """What an import stored for the owner."""

    owner_id: str
    turns: int
    facts: int
    fact_versions: int
    sessions: int


class _Refused(Exception):
    """Enough errors: stop looking."""


class _Errors:
    """The errors found so far, by the item's path (``turns[17].role``)."""

    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        self.found.setdefault(path, []).append(message)
        if len(self.found) >= MAX_ERRORS:
            raise _Refused

    def check(self, path: str, validator: Callable[[Any], None], value: Any) -> None:
        try:
            validator(value)
        except ValidationError as e:
            for message in e.messages:
                self.add(path, message)


def _integer(low: int) -> Callable[[Any], None]:
    def validate(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**63:
            raise ValidationError(f"Ensure this value is an integer >= {low}.")

    return validate


def _nullable(validator: Callable[[Any], None]) -> Callable[[Any], None]:
    def validate(value: Any) -> None:
        if value is not None:
            validator(value)

    return validate


def _boolean(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValidationError("Must be true or false.")


def _role(value: Any) -> None:
    if value not in ROLES:
        raise ValidationError(f"{value!r} is not a valid choice: one of {', '.join(Role.values)}.")


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _time(value: Any) -> None:
    if _parse_time(value) is None:
        raise ValidationError("Enter an ISO-8601 date and time with its UTC offset (or Z).")


RULES: dict[str, dict[str, Callable[[Any], None]]] = {
    "facts": {
        "key": validate_fact_key,
        "value": validate_json_value,
        "session_id": _nullable(validate_session_id),
        "updated_at": _time,
        "version": _integer(1),
        "expires_at": _nullable(_time),
    },
    "fact_history": {
        "key": validate_fact_key,
        "value": validate_json_value,
        "version": _integer(1),
        "session_id": _nullable(validate_session_id),
        "updated_at": _time,
        "source_turn_seq": _nullable(_integer(1)),
        "deleted": _boolean,
        "actor": validate_actor,
        "expires_at": _nullable(_time),
    },
    "turns": {
        "seq": _integer(1),
        "session_id": validate_session_id,
        "role": _role,
        "content": validate_content,
        "metadata": validate_metadata,
        "created_at": _time,
    },
    "sessions": {
        "session_id": validate_session_id,
        "first_seen": _time,
        "last_seen": _time,
        "turn_count": _integer(0),
    },
}


def _fields(
    errors: _Errors, path: str, item: Any, fields: tuple[str, ...], optional: tuple[str, ...] = ()
) -> bool:
    """Whether ``item`` is an object of exactly ``fields`` (those of ``optional`` may be missing);
    each difference is an error."""
    if not isinstance(item, dict):
        errors.add(path, "Must be a JSON object.")
        return False
    for name in fields:
        if name not in item and name not in optional:
            errors.add(f"{path}.{name}" if path != "document" else name, "This field is required.")
    for name in item:
        if name not in fields:
            # NOTE: refused, not ignored: a dropped field would not give back the document given.
            where = f"{path}.{name}" if path != "document" else str(name)
            errors.add(where, "Unknown field: this version imports only " + ", ".join(fields))
    return all(name in item or name in optional for name in fields) and all(
        name in fields for name in item
    )


def _items(errors: _Errors, document: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The valid items of the list ``name``, each field checked by its rule."""
    items = document.get(name)
    if not isinstance(items, list):
        errors.add(name, "Must be a JSON array.")
        return []
    valid = []
    for i, item in enumerate(items):
        path = f"{name}[{i}]"
        if not _fields(errors, path, item, FIELDS[name], OPTIONAL.get(name, ())):
            continue
        before = len(errors.found)
        for field, rule in RULES[name].items():
            if field in item:
                errors.check(f"{path}.{field}", rule, item[field])
        if len(errors.found) == before:
            valid.append(item)
    return valid


def _turns_check(errors: _Errors, turns: list[dict[str, Any]], sessions: set[str]) -> None:
    last = 0
    for i, turn in enumerate(turns):
        if turn["seq"] <= last:
            errors.add(
                f"turns[{i}].seq",
                f"Turns go in seq order, each seq once: {turn['seq']} follows {last}.",
            )
        last = max(last, turn["seq"])
        if turn["session_id"] not in sessions:
            errors.add(f"turns[{i}].session_id", "No session of the document has this id.")


def _history_check(
    errors: _Errors,
    facts: list[dict[str, Any]],
    versions: list[dict[str, Any]],
    exported_at: dt.datetime | None,
) -> None:
    """Each key's versions are 1, 2, ... in order; a current fact is its key's last version, and a
    key without one ends deleted or expired by ``exported_at``."""
    last: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, version in enumerate(versions):
        key = version["key"]
        expected = last[key][1]["version"] + 1 if key in last else 1
        if version["version"] != expected:
            errors.add(
                f"fact_history[{i}].version",
                f"The versions of {key!r} go 1, 2, ... in order: expected {expected}.",
            )
        if version["deleted"] and version["value"] is not None:
            errors.add(f"fact_history[{i}].value", "A deleted version has the value null.")
        last[key] = (i, version)
    current = set()
    for i, fact in enumerate(facts):
        key = fact["key"]
        if key in current:
            errors.add(f"facts[{i}].key", f"The fact {key!r} is given twice.")
        current.add(key)
        found = last.get(key)
        if found is None:
            errors.add(f"facts[{i}]", f"The fact {key!r} has no version in fact_history.")
            continue
        version = found[1]
        same = (
            not version["deleted"]
            and version["version"] == fact["version"]
            and codec.json_equal(version["value"], fact["value"])
            and version["session_id"] == fact["session_id"]
            and _parse_time(version["updated_at"]) == _parse_time(fact["updated_at"])
            and _parse_time(version.get("expires_at")) == _parse_time(fact.get("expires_at"))
        )
        if not same:
            errors.add(
                f"facts[{i}]", f"The fact {key!r} is not the last version of its fact_history."
            )
    for key, (i, version) in last.items():
        expires_at = _parse_time(version.get("expires_at"))
        expired = expires_at is not None and exported_at is not None and expires_at <= exported_at
        if key not in current and not version["deleted"] and not expired:
            errors.add(
                f"fact_history[{i}]",
                f"The last version of {key!r} is not deleted, but facts has no {key!r}.",
            )


class _Checked(NamedTuple):
    owner_id: str
    facts: list[dict[str, Any]]
    versions: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    summary: dict[str, Any] | None


def _summary_check(errors: _Errors, summary: Any) -> dict[str, Any] | None:
    """The document's summary once it is one (``None``: the owner had none)."""
    if summary is None:
        return None
    if not isinstance(summary, dict):
        errors.add("summary", "Must be an object or null.")
        return None
    _fields(errors, "summary", summary, SUMMARY_FIELDS)
    if not isinstance(summary.get("text"), str) or "\x00" in summary.get("text", ""):
        errors.add("summary.text", "Must be a string without NUL.")
    for name, least in (("through_seq", 1), ("tokens", 0)):
        value = summary.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value < 2**31:
            errors.add(f"summary.{name}", f"Must be an integer of at least {least}.")
    errors.check("summary.updated_at", _time, summary.get("updated_at"))
    return summary if not errors.found else None


def _document_check(document: Any, owner_id: str | None) -> _Checked:
    """The document's items, once every rule holds; else ``ValidationError`` naming each bad item
    (up to ``MAX_ERRORS``)."""
    errors = _Errors()
    checked = None
    try:
        if owner_id is not None:
            errors.check("owner_id", validate_owner_id, owner_id)
        if not isinstance(document, dict):
            errors.add("document", "Must be a JSON object.")
            raise _Refused
        if document.get("format") != EXPORT_FORMAT:
            errors.add("format", f"Must be {EXPORT_FORMAT!r}.")
        if document.get("version") != EXPORT_VERSION or isinstance(document.get("version"), bool):
            errors.add("version", f"This version of memory imports version {EXPORT_VERSION}.")
        _fields(errors, "document", document, FIELDS["document"])
        errors.check("user_id", validate_owner_id, document.get("user_id"))
        errors.check("exported_at", _time, document.get("exported_at"))
        summary = _summary_check(errors, document.get("summary"))
        facts = _items(errors, document, "facts")
        given = document.get("facts")
        if isinstance(given, list) and len(given) > conf.MAX_FACTS:
            limit = conf.MAX_FACTS
            errors.add("facts", f"A user holds at most {limit} facts (MEMORY['MAX_FACTS']).")
        versions = _items(errors, document, "fact_history")
        turns = _items(errors, document, "turns")
        sessions = _items(errors, document, "sessions")
        session_ids: set[str] = set()
        for i, session in enumerate(sessions):
            if session["session_id"] in session_ids:
                errors.add(f"sessions[{i}].session_id", "This session is given twice.")
            session_ids.add(session["session_id"])
            if _checked_time(session["first_seen"]) > _checked_time(session["last_seen"]):
                errors.add(f"sessions[{i}].first_seen", "Must not be after last_seen.")
        _turns_check(errors, turns, session_ids)
        _history_check(errors, facts, versions, _parse_time(document.get("exported_at")))
        target = owner_id if owner_id is not None else document["user_id"]
        if summary is not None and summary["through_seq"] > (turns[-1]["seq"] if turns else 0):
            errors.add("summary.through_seq", "Must not be after the last turn's seq.")
        checked = _Checked(target, facts, versions, turns, sessions, summary)
    except _Refused:
        pass
    if errors.found or checked is None:
        raise ValidationError(errors.found)
    return checked


def _memory_held(owner: Owner) -> bool:
    return any(
        model.objects.filter(owner=owner).exists() for model in (Turn, Fact, FactVersion, Session)
    )


def memory_import(*, document: Mapping[str, Any], owner_id: str | None = None) -> ImportResult:
    """Load an export document (``selectors.owner_export``'s, parsed) into the owner it names, or
    into ``owner_id``; return what was stored.

    Every item is checked first by the rules the API applies to writes, and the document as a
    whole (seq order, sessions listed, versions 1, 2, ...). Then one transaction stores it as it
    was: seqs, timestamps, versions, expiries, sessions; the cached copy is dropped after commit.
    Turns get no idempotency key and no fact extraction. Raises ``ValidationError``
    ({"turns[17].role": messages, ...}, up to 20 items) for a bad document, or ({"user_id":
    message}) when the owner already has memory; then nothing changed. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    checked = _document_check(document, owner_id)
    with service_transaction():
        owner = owner_lock(checked.owner_id, create=True)
        if _memory_held(owner):
            raise ValidationError(
                {
                    "user_id": [
                        f"{checked.owner_id} already has memory; an import goes only into an "
                        "owner with none (forget it first)."
                    ]
                }
            )
        _store(owner, checked)
        last_seq = checked.turns[-1]["seq"] if checked.turns else 0
        cache.owner_drop(owner, turns=max(last_seq - owner.last_seq, 0))
        # The imported turns and facts are found by meaning too, once the run is done.
        embedding_due(checked.owner_id)
    return ImportResult(
        checked.owner_id,
        len(checked.turns),
        len(checked.facts),
        len(checked.versions),
        len(checked.sessions),
    )


def _checked_time(value: Any) -> dt.datetime:
    """A time the check took (``_parse_time`` is None only for one it refused)."""
    at = _parse_time(value)
    assert at is not None
    return at


# The fields of an item that are times, parsed on the way in.
TIME_FIELDS = frozenset({"first_seen", "last_seen", "created_at", "updated_at", "expires_at"})


def _row(item: Mapping[str, Any], fields: tuple[str, ...], **absent: Any) -> dict[str, Any]:
    """The model fields of a checked item: ``fields``, its times parsed; a field the item
    lacks (an optional one) is ``absent``'s, else ``None``."""
    row = {field: item.get(field, absent.get(field)) for field in fields}
    return {f: _parse_time(v) if f in TIME_FIELDS else v for f, v in row.items()}


def _store(owner: Owner, checked: _Checked) -> None:
    """Insert the checked items for ``owner`` (locked, with no memory), in batches."""
    Session.objects.bulk_create(
        (Session(owner=owner, **_row(s, SESSION_FIELDS)) for s in checked.sessions),
        batch_size=BATCH_ROWS,
    )
    Turn.objects.bulk_create(
        (Turn(owner=owner, **_row(t, TURN_FIELDS)) for t in checked.turns),
        batch_size=BATCH_ROWS,
    )
    FactVersion.objects.bulk_create(
        (
            FactVersion(owner=owner, **_row(v, FACT_VERSION_FIELDS, actor="import"))
            for v in checked.versions
        ),
        batch_size=BATCH_ROWS,
    )
    sources = {(v["key"], v["version"]): v["source_turn_seq"] for v in checked.versions}
    for f in checked.facts:
        # NOTE: one save per fact: bulk_create would write JSON null as SQL NULL.
        row = _row(f, FACT_FIELDS)
        if row["value"] is None:
            row["value"] = Value(None, JSONField())
        Fact(owner=owner, source_turn_seq=sources[(f["key"], f["version"])], **row).save()

    if checked.summary is not None:
        Summary.objects.create(owner=owner, **_row(checked.summary, SUMMARY_FIELDS))


amemory_import = aio.twin(memory_import)
