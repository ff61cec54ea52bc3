"""Reading the public benchmark files a user has, LongMemEval (``longmemeval_s_cleaned.json`` and
its siblings) and LoCoMo (``locomo10.json``), into one shape (``EvalSet``).

Turn ids are the sets' own: LongMemEval's ``<session id>_<n>`` (n from 1, as its retrieval code
numbers them), LoCoMo's dia ids (``"D1:3"``). LoCoMo's ``speaker_a`` is stored as the user,
``speaker_b`` as the assistant, each turn as ``<speaker>: <text>`` (docs/recall.md).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

LONGMEMEVAL = "longmemeval"
LOCOMO = "locomo"
_LOCOMO_EVIDENCE = re.compile(r"D\d+:\d+")
_SESSION_KEY = re.compile(r"session_(\d+)")


class EvalFileError(ValueError):
    """The file is neither format, or an item of it is malformed (the message says where)."""


@dataclass
class EvalTurn:
    key: str
    session: str
    role: str
    content: str


@dataclass
class EvalSession:
    key: str
    at: dt.datetime | None
    turns: list[EvalTurn]


@dataclass
class EvalQuestion:
    """A question over the conversation ``corpus``, with its evidence turn and session ids."""

    key: str
    kind: str
    question: str
    corpus: str
    asked_at: dt.datetime | None
    turns: set[str]
    sessions: set[str]


@dataclass
class EvalSet:
    format: str
    conversations: dict[str, list[EvalSession]] = field(default_factory=dict)
    questions: list[EvalQuestion] = field(default_factory=list)
    skipped: int = 0


def _longmemeval_date(value: Any) -> dt.datetime | None:
    """``2023/05/20 (Sat) 02:21`` (LongMemEval's dates), as UTC."""
    if not isinstance(value, str):
        return None
    parts = value.split()
    try:
        day = dt.datetime.strptime(parts[0], "%Y/%m/%d")
        if len(parts) > 2:
            hour, minute = (int(x) for x in parts[-1].split(":"))
            day = day.replace(hour=hour, minute=minute)
    except (ValueError, IndexError):
        return None
    return day.replace(tzinfo=dt.UTC)


def _locomo_date(value: Any) -> dt.datetime | None:
    """``1:56 pm on 8 May, 2023`` (LoCoMo's dates), as UTC."""
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _longmemeval(data: list[Any]) -> EvalSet:
    found = EvalSet(LONGMEMEVAL)
    for n, entry in enumerate(data):
        try:
            key = str(entry["question_id"])
            sessions = []
            pairs = zip(
                entry["haystack_session_ids"],
                entry["haystack_dates"],
                entry["haystack_sessions"],
                strict=True,
            )
            for session_id, date, turns in pairs:
                session_id = str(session_id)
                items = [
                    EvalTurn(f"{session_id}_{i}", session_id, t["role"], str(t["content"]))
                    for i, t in enumerate(turns, 1)
                ]
                sessions.append(EvalSession(session_id, _longmemeval_date(date), items))
            evidence = {
                f"{sid}_{i}"
                for sid, turns in zip(
                    entry["haystack_session_ids"], entry["haystack_sessions"], strict=True
                )
                for i, t in enumerate(turns, 1)
                if t.get("has_answer")
            }
            question = EvalQuestion(
                key,
                str(entry["question_type"]),
                str(entry["question"]),
                key,
                _longmemeval_date(entry.get("question_date")),
                evidence,
                {str(s) for s in entry.get("answer_session_ids", [])},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise EvalFileError(f"item {n} is not a LongMemEval question: {e!r}") from e
        # NOTE: sorted by date (stable): the owner's turns are in the order they were said.
        sessions.sort(key=lambda s: s.at or dt.datetime.min.replace(tzinfo=dt.UTC))
        found.conversations[key] = sessions
        found.questions.append(question)
    return found


def _locomo(data: list[Any]) -> EvalSet:
    found = EvalSet(LOCOMO)
    for n, sample in enumerate(data):
        try:
            key = str(sample.get("sample_id", f"conv-{n}"))
            conversation = sample["conversation"]
            speakers = {conversation["speaker_a"]: "user", conversation["speaker_b"]: "assistant"}
            numbers = sorted(
                int(m.group(1))
                for name, value in conversation.items()
                if (m := _SESSION_KEY.fullmatch(name)) and isinstance(value, list)
            )
            sessions = []
            for number in numbers:
                session_key = f"D{number}"
                turns = []
                for t in conversation[f"session_{number}"]:
                    content = f"{t['speaker']}: {t['text']}"
                    if t.get("blip_caption"):
                        content += f" [shared {t['blip_caption']}]"
                    role = speakers.get(t["speaker"], "user")
                    turns.append(EvalTurn(str(t["dia_id"]), session_key, role, content))
                at = _locomo_date(conversation.get(f"session_{number}_date_time"))
                sessions.append(EvalSession(session_key, at, turns))
            known = {t.key for s in sessions for t in s.turns}
            last = max((s.at for s in sessions if s.at), default=None)
            for i, qa in enumerate(sample["qa"]):
                ids = set(_LOCOMO_EVIDENCE.findall(" ".join(map(str, qa.get("evidence", [])))))
                ids &= known
                if not ids:
                    found.skipped += 1
                    continue
                found.questions.append(
                    EvalQuestion(
                        f"{key}:{i}",
                        str(qa.get("category", "")),
                        str(qa["question"]),
                        key,
                        last + dt.timedelta(days=1) if last else None,
                        ids,
                        {x.split(":")[0] for x in ids},
                    )
                )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise EvalFileError(f"item {n} is not a LoCoMo conversation: {e!r}") from e
        found.conversations[key] = sessions
    return found


def evalset_read(*, data: Any) -> EvalSet:
    """``data`` (a parsed LongMemEval or LoCoMo file) as an ``EvalSet``; the format is told by
    its first item. Raises ``EvalFileError`` for anything else."""
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise EvalFileError("Expected a JSON list of LongMemEval questions or LoCoMo samples.")
    if "haystack_sessions" in data[0]:
        return _longmemeval(data)
    if "conversation" in data[0] and "qa" in data[0]:
        return _locomo(data)
    raise EvalFileError(
        "Neither format: a LongMemEval question has haystack_sessions, a LoCoMo sample has "
        "conversation and qa."
    )
