"""Writes of the vectors a LangGraph store computes with its own ``index`` configuration
(``memory.integrations.langgraph.MemoryStore(index=...)``): one per field of a fact's current
version, replaced when the store puts the fact again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memory import aio
from memory.models import Fact, StoreVector
from memory.services.common import field_check, service_transaction
from memory.validators import validate_owner_id


def store_vectors_put(
    *,
    owner_id: str,
    model: str,
    vectors: Mapping[str, Sequence[tuple[str, list[float]]]],
) -> None:
    """Replace the owner's vectors of ``model`` for the facts ``vectors`` names (key -> ``(field
    path, vector)`` list), tied to each fact's current version; unknown keys are skipped. Raises
    ``ValidationError`` for a bad owner id, ``MemoryUnavailable`` when the database cannot be
    reached; then nothing changed."""
    field_check("user_id", validate_owner_id, owner_id)
    if not vectors:
        return
    with service_transaction():
        facts = Fact.objects.filter(owner__external_id=owner_id, key__in=list(vectors)).values_list(
            "pk", "key", "version"
        )
        held = {key: (pk, version) for pk, key, version in facts}
        StoreVector.objects.filter(
            fact_id__in=[pk for pk, _ in held.values()], model=model
        ).delete()
        StoreVector.objects.bulk_create(
            [
                StoreVector(
                    fact_id=held[key][0],
                    model=model,
                    path=path,
                    version=held[key][1],
                    vector=vector,
                )
                for key, rows in vectors.items()
                if key in held
                for path, vector in rows
            ]
        )


astore_vectors_put = aio.twin(store_vectors_put)
