"""``manage.py memory_mcp --user USERNAME``: the memory's tools over MCP on stdin and stdout,
for a desktop client (Claude Desktop, an IDE) that starts it, as that user: their own memory, or
with ``--owner OWNER_ID`` (a service user only) that owner's. Needs the extra ``mcp``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from memory.extras import extra_install
from memory.permissions import can_reach, owner_id_for
from memory.validators import actor_of, validate_owner_id

COMMAND = "manage.py memory_mcp"


class Command(BaseCommand):
    help = (
        "Serve the memory's tools over MCP on stdin/stdout (for a desktop client to start), "
        "on the memory of --user (or, for a service user, of --owner)."
    )
    # NOTE: stdout is the protocol's: nothing but its messages may be written there.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user",
            required=True,
            help="the username whose memory the tools reach (MEMORY['OWNER_RESOLVER'] maps it)",
        )
        parser.add_argument(
            "--owner",
            help="the owner id to serve instead; only for a user holding "
            "memory.access_all_memories",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # NOTE: the SDK first: without the extra, its dependencies (anyio) are missing too,
        # and the error names the extra to install, not a module of it.
        try:
            from memory.integrations.mcp import MemoryMCPServer
        except ImportError as e:
            raise CommandError(str(e).replace("memory.integrations.mcp", COMMAND, 1)) from e
        try:
            import anyio
        except ImportError as e:
            raise CommandError(f"{COMMAND} needs the extra mcp: {extra_install('mcp')}") from e
        owner_id, caller = self._owner(options["user"], options["owner"])
        server = MemoryMCPServer(
            owner_id=owner_id, caller=caller, actor=actor_of("api", options["user"])
        )
        # NOTE: the tool calls run in asgiref's thread for sync code, with connections of
        # their own; this thread's is not needed again.
        connections.close_all()
        anyio.run(server.run_stdio_async)

    @staticmethod
    def _owner(username: str, named: str | None) -> tuple[str, str]:
        model = get_user_model()
        user = model._default_manager.filter(**{model.USERNAME_FIELD: username}).first()
        if user is None or not getattr(user, "is_active", True):
            raise CommandError(f"No active user {username!r}.")
        own = owner_id_for(user)
        owner_id = named if named is not None else own
        if owner_id is None:
            raise CommandError(
                f"The user {username!r} reaches no memory (MEMORY['OWNER_RESOLVER'])."
            )
        try:
            validate_owner_id(owner_id)
        except ValidationError as e:
            raise CommandError(f"{owner_id!r}: {' '.join(e.messages)}") from e
        if not can_reach(user, owner_id):
            raise CommandError(
                f"The user {username!r} may not reach {owner_id!r}: only a service user "
                "(memory.access_all_memories) may name another owner."
            )
        return owner_id, f"user:{user.pk}" if owner_id == own else f"owner:{owner_id}"
