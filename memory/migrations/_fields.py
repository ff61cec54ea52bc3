"""Builders of the fields and operations the migrations repeat. A migration's schema is
history: a builder here is never edited once a migration calls it (add another instead)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import deletion

from memory.models import VectorField


def auto_id() -> tuple[str, models.Field[Any, Any]]:
    return (
        "id",
        models.BigAutoField(
            auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
        ),
    )


def add(model_name: str, name: str, field: models.Field[Any, Any]) -> migrations.AddField:
    return migrations.AddField(model_name=model_name, name=name, field=field)


def model(
    name: str, fields: list[tuple[str, models.Field[Any, Any]]], options: dict[str, Any]
) -> migrations.CreateModel:
    """A table with Django's auto id before ``fields``."""
    return migrations.CreateModel(name=name, fields=[auto_id(), *fields], options=options)


def owner(related_name: str, *, one: bool = False, db_index: bool = True) -> models.Field[Any, Any]:
    """A key to the owner that cascades: one-to-one with ``one``."""
    kind = models.OneToOneField if one else models.ForeignKey
    options: dict[str, Any] = {} if db_index else {"db_index": False}
    return kind(on_delete=deletion.CASCADE, related_name=related_name, to="memory.owner", **options)


def loose_key(to: str, *, one: bool = False) -> models.Field[Any, Any]:
    """A key with no constraint in the database: its rows are kept by the code that writes them."""
    kind = models.OneToOneField if one else models.ForeignKey
    return kind(db_constraint=False, on_delete=deletion.DO_NOTHING, related_name="+", to=to)


def vector_keys(to: str) -> tuple[tuple[str, models.Field[Any, Any]], ...]:
    """A vector table's keys: its row's, as the primary key, and the owner's, both without a
    constraint (the database function that writes them keeps them)."""
    return (
        (
            to.rsplit(".", 1)[1],
            models.OneToOneField(
                db_constraint=False,
                on_delete=models.DO_NOTHING,
                primary_key=True,
                serialize=False,
                to=to,
            ),
        ),
        (
            "owner",
            models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=models.DO_NOTHING,
                related_name="+",
                to="memory.owner",
            ),
        ),
    )


def vector_table(
    name: str, to: str, *fields: tuple[str, models.Field[Any, Any]]
) -> migrations.SeparateDatabaseAndState:
    """A vector table of the rows of ``to``, in the state only (``sql.vectors_setup`` creates it
    where pgvector is): its keys, the embedder's model, ``fields``, the vector."""
    return migrations.SeparateDatabaseAndState(
        state_operations=[
            migrations.CreateModel(
                name=name,
                fields=[
                    *vector_keys(to),
                    ("model", models.CharField(max_length=100)),
                    *fields,
                    ("vector", VectorField()),
                ],
                options={"default_permissions": ()},
            ),
        ],
    )


def work_queue(
    name: str, key: tuple[str, models.Field[Any, Any]], index: str
) -> migrations.CreateModel:
    """A work queue: one row a ``key``, when its work was asked for and when last enqueued."""
    return migrations.CreateModel(
        name=name,
        fields=[
            auto_id(),
            ("created_at", models.DateTimeField()),
            ("enqueued_at", models.DateTimeField()),
            key,
        ],
        options={
            "default_permissions": (),
            "indexes": [models.Index(fields=["enqueued_at"], name=index)],
        },
    )


def thread() -> tuple[tuple[str, models.Field[Any, Any]], ...]:
    """A LangGraph row's thread and namespace."""
    return (
        ("thread_id", models.CharField(max_length=128)),
        ("checkpoint_ns", models.TextField(blank=True, default="")),
    )


def internal(name: str, *unique: str) -> dict[str, Any]:
    """The options of a table no one is given rights to, unique over ``unique``."""
    return {
        "default_permissions": (),
        "constraints": [models.UniqueConstraint(fields=unique, name=name)],
    }
