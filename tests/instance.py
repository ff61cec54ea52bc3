"""Another app instance, as a separate process: ``python -m tests.instance <command> ...``.

Used by the tests to write and read one owner from processes with their own connections and
Redis pools, and (``token <username>``) to make a service caller's API token. Prints JSON.
``spawn``/``run`` start such a process from a test, on that test's database and key prefix.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """The URL of the running test's database, for a connection or a process of its own."""
    from django.db import connection

    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return (
        f"postgres://{db['USER'] or 'postgres'}{password}@{db['HOST'] or '127.0.0.1'}"
        f":{db['PORT'] or 5432}/{db['NAME']}"
    )


def environment() -> dict[str, str]:
    """The environment of another instance of the running test's app: the same test database
    (committed rows only: use it from ``transaction=True`` tests) and the same Redis prefix."""
    from django.conf import settings

    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "MEMORY_TEST_KEY_PREFIX": settings.TEST_KEY_PREFIX,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }


def demo_terminal(tree: Path) -> dict[str, str]:
    """A second terminal in ``tree``, a copy of the project, as if ``make run`` served there on
    the running test's database and Redis: writes ``tree/.tmp/demo.env`` as the demo writes it
    (with ``DATABASE_URL`` set) and returns the terminal's environment, another instance's
    (the test's settings module and Redis prefix), for the commands a page says to run."""
    env = environment()
    (tree / ".tmp").mkdir(exist_ok=True)
    exports = {"DJANGO_DEBUG": "1", "DATABASE_URL": env["DATABASE_URL"]}
    exports["REDIS_URL"] = env["REDIS_URL"]
    (tree / ".tmp" / "demo.env").write_text(
        "".join(f"export {name}={shlex.quote(value)}\n" for name, value in exports.items())
    )
    return env


def spawn(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -m tests.instance *args`` as another instance; read its JSON on stdout.
    ``env`` adds to its environment (``{"REDIS_URL": own_redis.url}``: a Redis of the test's own).
    """
    return subprocess.Popen(
        [sys.executable, "-m", "tests.instance", *args],
        cwd=ROOT,
        env={**environment(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(*args: str, env: Mapping[str, str] | None = None) -> Any:
    """Run ``python -m tests.instance *args`` to its end and return what it printed."""
    out, err = (proc := spawn(*args, env=env)).communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from memory import selectors, services

    command, owner_id = argv[0], argv[1]
    if command == "append":
        count, session_id = int(argv[2]), argv[3]
        seqs = [
            services.turn_append(
                owner_id=owner_id, session_id=session_id, role="user", content=f"{session_id} {i}"
            ).seq
            for i in range(count)
        ]
        print(json.dumps(seqs))
    elif command == "token":
        from django.contrib.auth.models import Permission, User
        from rest_framework.authtoken.models import Token

        user, _ = User.objects.get_or_create(username=owner_id)
        user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
        print(json.dumps(Token.objects.get_or_create(user=user)[0].key))
    elif command == "context":
        print(
            json.dumps(
                selectors.context_get(owner_id=owner_id, turns=int(argv[2])), ensure_ascii=False
            )
        )
    elif command == "context_across":
        # context_across <owner id> <ISO instant>: the context read once, then again once the
        # instant has passed on this process's clock, with the times of both reads.
        import datetime as dt
        import time

        until = dt.datetime.fromisoformat(argv[2])
        reads = []
        for _ in range(2):
            at = dt.datetime.now(dt.UTC)
            reads.append({"at": at.isoformat(), **selectors.context_get(owner_id=owner_id)})
            time.sleep(max((until - dt.datetime.now(dt.UTC)).total_seconds(), 0) + 0.05)
        print(json.dumps(reads, ensure_ascii=False))
    elif command == "contexts":
        # contexts <turns> <repeat> <owner id>...: each owner's context, read <repeat> times.
        turns, repeat, owner_ids = int(argv[1]), int(argv[2]), argv[3:]
        contexts = [
            selectors.context_get(owner_id=other, turns=turns)
            for _ in range(repeat)
            for other in owner_ids
        ]
        print(json.dumps(contexts, ensure_ascii=False))
    elif command == "langchain":
        # langchain <owner id> <session id> <input> <reply>: one turn of tests/test_langchain.py's
        # chain; prints what its model was given, as [[type, content]...].
        from tests.test_langchain import chain_turn

        seen = chain_turn(owner_id=owner_id, session_id=argv[2], text=argv[3], reply=argv[4])
        print(json.dumps(seen, ensure_ascii=False))
    elif command == "langchain_tools":
        # langchain_tools <owner id> <session id> <input> <script>: one turn of
        # tests/test_langchain_tools.py's tool loop (invoke); prints what its model was given.
        from tests.test_langchain_tools import chat_turn

        seen = chat_turn(owner_id=owner_id, session_id=argv[2], text=argv[3], script=argv[4])
        print(json.dumps(seen, ensure_ascii=False))
    elif command == "openai_agents":
        # openai_agents <owner id> <session id> <input> <reply>: one run of
        # tests/test_openai_agents.py's agent (Runner.run_sync); prints what its model was given.
        from tests.test_openai_agents import agent_turn

        seen = agent_turn(owner_id=owner_id, session_id=argv[2], text=argv[3], reply=argv[4])
        print(json.dumps(seen, ensure_ascii=False))
    elif command == "langgraph":
        # langgraph <owner id> <thread id> <input>: one run of tests/test_langgraph.py's graph
        # (invoke); prints its final state.
        from tests.test_langgraph import graph_turn

        state = graph_turn(owner_id=owner_id, thread_id=argv[2], text=argv[3])
        print(json.dumps(state, ensure_ascii=False))
    elif command == "link":
        # link <owner id> <from owner id> [<turns per batch>]
        from django.conf import settings
        from django.test import override_settings

        batch = {"LINK_BATCH_TURNS": int(argv[3])} if len(argv) > 3 else {}
        with override_settings(MEMORY={**settings.MEMORY, **batch}):
            result = services.memory_link(owner_id=owner_id, from_owner_id=argv[2])
        print(json.dumps(result._asdict()))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])


def import_error_without(package: str, module: str) -> str:
    """What importing ``module`` says, in a Django process of its own where ``package`` cannot
    be imported (an extra that is not installed): the ``ImportError``'s text ("" if none)."""
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "import django; django.setup()\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
