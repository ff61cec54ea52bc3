"""Tables of the app: the memory owner (its seq counter and cache stamp), sessions, turns,
facts and every version of every fact. Postgres is the truth; Redis only copies it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.apps import apps as django_apps
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class Owner(models.Model):
    """The end user a memory belongs to, by the chat product's external id.

    Its row is the per-owner write lock; ``last_seq`` numbers turns, ``stamp`` marks each committed
    change for the cache.
    """

    # NOTE: a constraint rather than ``unique=True``, which would add a ``LIKE`` index nothing
    # reads.
    external_id = models.CharField(max_length=128)
    last_seq = models.BigIntegerField(default=0)
    # NOTE: from one database-wide sequence, so it grows across a forget and a re-creation.
    stamp = models.BigIntegerField(default=0)
    # NOTE: the stamp the owner held before ``stamp``, set by the statement that draws a stamp:
    # its RETURNING gives the stamp it replaced, also after waiting for another writer's lock.
    prev_stamp = models.BigIntegerField(db_default=0)
    # NOTE: the cache's transactional outbox: set with every write, cleared once Redis confirmed.
    cache_dirty = models.BooleanField(default=False)
    # NOTE: tokens of the turns after the summary's ``through_seq``: how an append knows, without
    # reading a turn, that a refresh is due (``MEMORY["SUMMARY_AFTER_TOKENS"]``).
    summary_tokens = models.BigIntegerField(db_default=0)
    # NOTE: turns up to this seq have their vectors. A database default: the append function inserts
    # owners without naming it.
    embedded_seq = models.BigIntegerField(db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "memory owner"
        ordering = ["external_id"]
        permissions = [("access_all_memories", "Can read and write every owner's memory")]
        constraints = [
            models.UniqueConstraint(fields=["external_id"], name="memory_owner_external_id_uniq"),
        ]
        indexes = [
            models.Index(
                fields=["updated_at"],
                condition=Q(cache_dirty=True),
                name="memory_owner_dirty_idx",
            ),
            models.Index(fields=["-updated_at"], name="memory_owner_recent_idx"),
        ]

    def __str__(self) -> str:
        return self.external_id


def _owner_key(related_name: str) -> models.ForeignKey[Owner, Owner]:
    """The owner of a session, turn, fact or fact version; indexed by each table's unique
    constraint."""
    return models.ForeignKey(
        Owner, on_delete=models.CASCADE, related_name=related_name, db_index=False
    )


class Summary(models.Model):
    """The owner's summary of its turns 1..``through_seq``; one per owner, refreshed by a
    deferred task (``ops.summary_refresh``), deleted with the owner."""

    owner = models.OneToOneField(Owner, on_delete=models.CASCADE, related_name="summary")
    text = models.TextField()
    through_seq = models.BigIntegerField()
    tokens = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "conversation summary"
        verbose_name_plural = "conversation summaries"
        default_permissions = ("view",)
        constraints = [
            models.CheckConstraint(
                condition=Q(through_seq__gte=1), name="memory_summary_through_seq_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"summary through #{self.through_seq}"


class Session(models.Model):
    """A label a chat product gives a run of turns: a tab, a device, a reconnect."""

    owner = _owner_key("sessions")
    session_id = models.CharField(max_length=128)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    turn_count = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "chat session"
        ordering = ["-last_seen"]
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "session_id"], name="memory_session_owner_sid_uniq"
            ),
        ]
        indexes = [
            # NOTE: the keyset order of ``selectors.session_list``: a deep page costs what the first
            # does.
            models.Index(
                fields=["owner", "-last_seen", "session_id"], name="memory_session_page_idx"
            )
        ]

    def __str__(self) -> str:
        return self.session_id


class Role(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


# The roles' values as a set: ``Role.values`` builds its list anew on each use.
ROLES = frozenset(Role.values)


def orm_delete_guard(owner_pks: Callable[[], Iterable[int]]) -> AbstractContextManager[None]:
    """What wraps an ORM delete of turns: set to ``memory.cache.orm_delete`` by
    ``MemoryConfig.ready()`` (the models import nothing above them)."""
    guard = getattr(django_apps.get_app_config("memory"), "orm_delete_guard", None)
    return guard(owner_pks) if guard is not None else nullcontext()


class TurnQuerySet(models.QuerySet["Turn"]):
    """Turns; a ``delete()`` outside the services drops the cached copy of each owner it touches
    after commit (``cache.orm_delete``), as a service write does."""

    def delete(self) -> tuple[int, dict[str, int]]:
        owners = Owner.objects.filter(pk__in=self.values("owner_id")).order_by()
        with orm_delete_guard(lambda: owners.values_list("pk", flat=True)):
            return super().delete()

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]


class Turn(models.Model):
    """One message of a conversation; append-only, numbered 1..N per owner in commit order."""

    owner = _owner_key("turns")
    seq = models.BigIntegerField()
    session_id = models.CharField(max_length=128)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    # NOTE: NULL, not "", for "no key": the partial unique constraint skips NULLs.
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()

    # NOTE: the ORM safety net for deletes lives in ``delete`` methods, not a ``post_delete``
    # receiver: any delete receiver makes Django load every turn of an owner to forget it.
    objects = TurnQuerySet.as_manager()

    # NOTE: on Postgres the table also has a generated ``search`` column and two GIN indexes (read
    # by memory.search); not a field, as loading a turn never needs it.

    class Meta:
        ordering = ["owner_id", "seq"]
        default_permissions = ("view", "delete")
        constraints = [
            models.UniqueConstraint(fields=["owner", "seq"], name="memory_turn_owner_seq_uniq"),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="memory_turn_idempotency_uniq",
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="memory_turn_seq_positive"),
            models.CheckConstraint(
                condition=Q(role__in=[choice.value for choice in Role]),
                name="memory_turn_role_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["owner", "session_id", "seq"], name="memory_turn_session_idx"),
        ]

    def __str__(self) -> str:
        # NOTE: no owner id here: that would cost a query per row wherever turns are listed.
        return f"#{self.seq} {self.role}"

    def delete(self, using: Any = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete the turn; outside the services, its owner's cached copy is dropped after
        commit."""
        with orm_delete_guard(lambda: [self.owner_id]):
            return super().delete(using=using, keep_parents=keep_parents)


class VectorField(models.Field):  # type: ignore[type-arg]
    """A pgvector ``halfvec`` of any length, as a list of floats; read and written by raw SQL
    (``memory.recall.vectors``)."""

    description = "pgvector halfvec"

    def db_type(self, connection: Any) -> str:
        return "halfvec"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[float] | None:
        if value is None or isinstance(value, list):
            return value
        return [float(x) for x in str(value).strip("[]").split(",") if x]

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return "[" + ",".join(repr(float(x)) for x in value) + "]"


class TurnVector(models.Model):
    """The embedding of one turn (``MEMORY["EMBEDDER"]``), for search by meaning.

    Only on PostgreSQL with pgvector (else there is no table and search stays textual); its keys
    cascade in the database. ``owner`` is kept so that a search scans one owner's vectors only.
    """

    turn = models.OneToOneField(
        "Turn", on_delete=models.DO_NOTHING, primary_key=True, db_constraint=False
    )
    owner = models.ForeignKey(
        Owner, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # The embedder's name: vectors of another model are not compared with this one's.
    model = models.CharField(max_length=100)
    vector = VectorField()

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return f"vector of turn {self.turn_id}"


class FactVector(models.Model):
    """The embedding of one fact's current version (key and value as text), for the LangGraph
    store's search by meaning.

    As ``TurnVector``: PostgreSQL with pgvector only. ``version`` is the fact version it was
    computed from; a fact changed since is compared by its words until re-embedded.
    """

    fact = models.OneToOneField(
        "Fact", on_delete=models.DO_NOTHING, primary_key=True, db_constraint=False
    )
    owner = models.ForeignKey(
        Owner, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    model = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    vector = VectorField()

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return f"vector of fact {self.fact_id}"


def fact_live(at: Any) -> Q:
    """The facts not expired at ``at``: what every read of current facts holds."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=at)


class Fact(models.Model):
    """The current value of one profile fact of an owner (``name``, ``likes``...)."""

    owner = _owner_key("facts")
    key = models.CharField(max_length=64)
    value = models.JSONField()
    version = models.PositiveIntegerField(default=1)
    session_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    source_turn_seq = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()
    # NOTE: from this instant the fact is absent from every read (each read filters by it, the
    # cached copy included), and ``ops.facts_expire`` deletes it later; NULL: never.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["owner_id", "key"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="memory_fact_owner_key_uniq"),
            models.CheckConstraint(
                condition=Q(version__gte=1), name="memory_fact_version_positive"
            ),
        ]
        indexes = [
            # NOTE: the sweep's order (``ops.facts_expire``), over only the facts that expire.
            models.Index(
                fields=["expires_at", "id"],
                condition=Q(expires_at__isnull=False),
                name="memory_fact_expires_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} v{self.version}"


class FactVersion(models.Model):
    """One change of a fact, kept for its history; a delete leaves a ``deleted`` version."""

    owner = _owner_key("fact_versions")
    key = models.CharField(max_length=64)
    value = models.JSONField(null=True)
    version = models.PositiveIntegerField()
    session_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    source_turn_seq = models.BigIntegerField(null=True, blank=True)
    deleted = models.BooleanField(default=False)
    updated_at = models.DateTimeField()
    # The fact's ``expires_at`` as this version set it (an export tells expired from deleted).
    expires_at = models.DateTimeField(null=True, blank=True)
    # Who made the change: "extractor", "api:<username>", "admin:<username>", "expiry",
    # "python" (a direct call of the Python API), or what an imported document said.
    actor = models.CharField(max_length=200, default="python")

    class Meta:
        ordering = ["owner_id", "key", "-version"]
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "key", "version"], name="memory_factversion_uniq"
            ),
        ]

    def __str__(self) -> str:
        deleted = " (deleted)" if self.deleted else ""
        return f"{self.key} v{self.version}{deleted}"


class CacheInvalidation(models.Model):
    """A forgotten owner whose cached copy is still to be dropped; deleted once Redis confirmed.

    The forget's transactional outbox: the owner row, and its dirty mark, is gone by then.
    """

    external_id = models.CharField(max_length=128)
    stamp = models.BigIntegerField()
    # NOTE: the database's clock, as every grace of the cache protocol is measured on it.
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        default_permissions = ()
        indexes = [models.Index(fields=["created_at"], name="memory_cacheinval_created_idx")]

    def __str__(self) -> str:
        return f"drop cache of {self.external_id} at {self.stamp}"


class OwnerLink(models.Model):
    """A link under way (``services.memory_link``): ``source``'s turns move into ``target`` a batch
    per transaction; the row maps moved seqs so that a link cut off resumes with nothing lost."""

    source = models.OneToOneField(Owner, on_delete=models.CASCADE, related_name="+")
    target = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="+")
    # {source seq (as text): seq on the target}, only for the seqs the source's facts name.
    seqs = models.JSONField(default=dict)
    started_at = models.DateTimeField(db_default=Now())

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return f"link of owner {self.source_id} into owner {self.target_id}"


class _WorkQueue(models.Model):
    """Work asked for and not done yet, one record each; deleted once done. Written in the
    transaction that asks for it, so that a lost task leaves the work to retry."""

    created_at = models.DateTimeField()
    # When a task for it was last handed to the task backend.
    enqueued_at = models.DateTimeField()

    class Meta:
        abstract = True
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self._work()} pending since {self.created_at:%Y-%m-%d %H:%M:%S}"

    def _work(self) -> str:
        """What work the record stands for."""
        raise NotImplementedError


class PendingExtraction(_WorkQueue):
    """A user turn whose deferred fact extraction has not run yet (docs/extraction.md;
    ``memory_extract --pending`` hands it again after a grace)."""

    # NOTE: no constraint and no cascade: a cascade would make Django load every turn of a bulk
    # delete. The task deletes a record whose turn is gone.
    turn = models.OneToOneField(
        Turn, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )

    class Meta(_WorkQueue.Meta):
        indexes = [models.Index(fields=["enqueued_at"], name="memory_pending_enqueued_idx")]

    def _work(self) -> str:
        return f"extraction of turn {self.turn_id}"


class PendingSummary(_WorkQueue):
    """An owner whose summary refresh is due: its append took ``summary_tokens`` past
    ``MEMORY["SUMMARY_AFTER_TOKENS"]`` (``manage.py memory_summarize --pending``)."""

    owner = models.OneToOneField(Owner, on_delete=models.CASCADE, related_name="+")

    class Meta(_WorkQueue.Meta):
        indexes = [models.Index(fields=["enqueued_at"], name="memory_pendsumm_enqueued_idx")]

    def _work(self) -> str:
        return f"summary of owner {self.owner_id}"


class StoreVector(models.Model):
    """The embedding of one field of a fact by a LangGraph store's own ``index`` configuration,
    computed when the item is put.

    A plain list of floats (any database), compared in Python over one owner's facts. ``version`` is
    the fact version it was computed from.
    """

    # NOTE: the key cascades in the database (on PostgreSQL): a fact deleted by any door takes its
    # vectors along with no query of Django's.
    fact = models.ForeignKey(
        "Fact", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    # The store's name for its embedder: a vector of another configuration is not compared.
    model = models.CharField(max_length=100)
    # The field path the text was taken from (``$`` for the whole value), and its place.
    path = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    vector = models.JSONField()

    class Meta:
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(
                fields=["fact", "model", "path"], name="memory_storevector_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"vector of fact {self.fact_id} at {self.path}"


class Checkpoint(models.Model):
    """One LangGraph checkpoint of an owner's thread, serialized by the saver's serde, without its
    channel values (``CheckpointBlob``). A thread is a session of the owner."""

    owner = _owner_key("checkpoints")
    thread_id = models.CharField(max_length=128)
    checkpoint_ns = models.TextField(blank=True, default="")
    checkpoint_id = models.CharField(max_length=128)
    parent_checkpoint_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    type = models.CharField(max_length=64)
    checkpoint = models.BinaryField()
    metadata = models.JSONField(default=dict)
    # {channel: version as text}: the channel values (``CheckpointBlob``) it is made of.
    channel_versions = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = "LangGraph checkpoint"
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "thread_id", "checkpoint_ns", "checkpoint_id"],
                name="memory_checkpoint_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id} of thread {self.thread_id}"


class CheckpointBlob(models.Model):
    """One channel's value at one version in an owner's thread: checkpoints share the values
    of the channels that did not change."""

    owner = _owner_key("+")
    thread_id = models.CharField(max_length=128)
    checkpoint_ns = models.TextField(blank=True, default="")
    channel = models.TextField()
    version = models.CharField(max_length=128)
    type = models.CharField(max_length=64)
    blob = models.BinaryField(null=True)

    class Meta:
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "thread_id", "checkpoint_ns", "channel", "version"],
                name="memory_checkpointblob_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} v{self.version} of thread {self.thread_id}"


# A pending write's key: one per task and index in a checkpoint of the owner's thread.
CHECKPOINT_WRITE_KEY = ("owner", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")


class CheckpointWrite(models.Model):
    """A pending write of a task to a checkpoint of an owner's thread."""

    owner = _owner_key("+")
    thread_id = models.CharField(max_length=128)
    checkpoint_ns = models.TextField(blank=True, default="")
    checkpoint_id = models.CharField(max_length=128)
    task_id = models.TextField()
    task_path = models.TextField(blank=True, default="")
    idx = models.IntegerField()
    channel = models.TextField()
    type = models.CharField(max_length=64)
    blob = models.BinaryField()

    class Meta:
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(
                fields=CHECKPOINT_WRITE_KEY, name="memory_checkpointwrite_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"write {self.task_id}/{self.idx} to checkpoint {self.checkpoint_id}"
