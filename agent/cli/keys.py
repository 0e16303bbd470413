"""`rag keys create|list|update|revoke|usage`: API keys scoped to collections (`agent.core.keys`), their quotas and
their usage per UTC day (`agent.core.quotas`), in the store's database."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.access import split_groups
from agent.cli.opened import run_on
from agent.config.settings import Settings
from agent.core.errors import InputError
from agent.core.keys import KEEP, ApiKey, Keep, PostgresKeys, check_collections, report_json, settings_keys
from tools.scope import ScopeError

T = TypeVar("T")

keys_app = typer.Typer(
    help="API keys scoped to collections: create (prints the token once), list, update (quotas), revoke, usage.",
    no_args_is_help=True,
)
console = Console(highlight=False)


def _with_keys(fn: Callable[[PostgresKeys], Awaitable[T]]) -> T:
    """Run `fn` on the keys of the configured database (table created when missing)."""
    return run_on(lambda: settings_keys(Settings()), fn)


def _collections(raw: str) -> tuple[str, ...]:
    try:
        return check_collections([c for c in raw.split(",") if c.strip()])
    except ScopeError as exc:
        raise InputError(f"--collections: {exc}") from None


def _limit(option: str, raw: str | None) -> int | Keep | None:
    """A quota option's value: a whole number >= 1, `default` (None: the service's default), or unset (`KEEP`)."""
    if raw is None:
        return KEEP
    if raw.strip().lower() == "default":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{option}={raw!r}; expected a whole number >= 1, or `default`") from None
    if value < 1:
        raise InputError(f"{option}={value}; expected a whole number >= 1, or `default`")
    return value


RPM_HELP = "Answer requests per minute this key may make (`default`: KEY_REQUESTS_PER_MINUTE; unset there: unlimited)."
TPD_HELP = "LLM tokens per UTC day this key may use (`default`: KEY_TOKENS_PER_DAY; unset there: unlimited)."


@keys_app.command("create")
def create(
    collections: Annotated[
        str,
        typer.Option(
            "--collections",
            help="Comma-separated collections the key may use, e.g. a,b (with --group: optional, default the "
            "group's grants).",
        ),
    ] = "",
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="Tie the key to a group: its holder reads that group's documents (and the public ones), with the "
            "roles granted to it (`rag access grant`).",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A label for the key (who or what holds it).")] = "",
    requests_per_minute: Annotated[str | None, typer.Option("--requests-per-minute", help=RPM_HELP)] = None,
    tokens_per_day: Annotated[str | None, typer.Option("--tokens-per-day", help=TPD_HELP)] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"id", "name", "collections", "created_at", "revoked_at", "requests_per_minute", '
            '"tokens_per_day", "group", "token"} only.',
        ),
    ] = False,
) -> None:
    """Create a key for COLLECTIONS (and/or tied to GROUP) and print its token: the only time it is shown (the
    database keeps a hash). Callers send it as `Authorization: Bearer <token>` and see only those collections; a key
    without a group reads only their public documents (ingested without groups)."""
    names = _collections(collections) if collections.strip() or group is None else ()
    checked_group = split_groups(group, "--group")[0] if group is not None and group.strip() else None
    if group is not None and checked_group is None:
        raise InputError("--group: empty; expected a group name")
    rpm, tpd = _limit("--requests-per-minute", requests_per_minute), _limit("--tokens-per-day", tokens_per_day)
    key, token = _with_keys(
        lambda keys: keys.create(
            names, name, None if rpm is KEEP else rpm, None if tpd is KEEP else tpd, group=checked_group
        )
    )
    if as_json:
        print(json.dumps(key.to_json() | {"token": token}))
        return
    scope = ", ".join(key.collections) or "its group's grants"
    tied = f", group {key.group}" if key.group is not None else ""
    console.print(f"key {key.id} ({scope}{tied}): {token}", markup=False, soft_wrap=True)
    console.print("store the token now: it is not shown again", markup=False)


@keys_app.command("list")
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="Print the keys as JSON only.")] = False,
) -> None:
    """Every key: id, name, collections, group, created, revoked. Tokens and hashes are never shown."""
    found: list[ApiKey] = _with_keys(lambda keys: keys.list())
    if as_json:
        print(json.dumps({"keys": [k.to_json() for k in found]}))
        return
    table = Table("id", "name", "collections", "group", "created", "revoked", "req/min", "tokens/day")
    for k in found:
        revoked = "-" if k.revoked_at is None else k.revoked_at.isoformat(timespec="seconds")
        created = k.created_at.isoformat(timespec="seconds")
        rpm = "default" if k.requests_per_minute is None else str(k.requests_per_minute)
        tpd = "default" if k.tokens_per_day is None else str(k.tokens_per_day)
        collections, group = ", ".join(k.collections) or "(grants)", Text(k.group or "-")
        table.add_row(str(k.id), Text(k.name or "-"), collections, group, created, revoked, rpm, tpd)
    console.print(table)


@keys_app.command("update")
def update(
    key_id: Annotated[int, typer.Argument(help="Key id (`rag keys list`).")],
    requests_per_minute: Annotated[str | None, typer.Option("--requests-per-minute", help=RPM_HELP)] = None,
    tokens_per_day: Annotated[str | None, typer.Option("--tokens-per-day", help=TPD_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the key as JSON only.")] = False,
) -> None:
    """Change a key's quotas (an option left out stays as it is; `default` clears the key's own): a running `rag
    serve` applies them within API_KEYS_CACHE_S seconds. Exit 1 when there is no such key."""
    rpm, tpd = _limit("--requests-per-minute", requests_per_minute), _limit("--tokens-per-day", tokens_per_day)
    if rpm is KEEP and tpd is KEEP:
        raise InputError("nothing to change: give --requests-per-minute and/or --tokens-per-day")
    key = _with_keys(lambda keys: keys.update_limits(key_id, rpm, tpd))
    if key is None:
        raise InputError(f"no key {key_id}; `rag keys list` shows the keys")
    if as_json:
        print(json.dumps(key.to_json()))
        return
    rpm_text = "default" if key.requests_per_minute is None else str(key.requests_per_minute)
    tpd_text = "default" if key.tokens_per_day is None else str(key.tokens_per_day)
    console.print(f"key {key.id}: {rpm_text} requests per minute, {tpd_text} tokens per day", markup=False)


@keys_app.command("usage")
def usage(
    days: Annotated[int, typer.Option("--days", min=1, max=366, help="UTC days covered, today included.")] = 7,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"days", "since", "usage": [{"key_id", "key_name", "day", "requests", "prompt_tokens", '
            '"completion_tokens", "total_tokens", "embed_ms", "llm_ms"}], "totals"} only (as GET /v1/usage).',
        ),
    ] = False,
) -> None:
    """What each key used per UTC day over the last DAYS days: answer requests, LLM tokens, embedding and LLM time."""
    since = datetime.now(UTC).date() - timedelta(days=days - 1)
    report = report_json(days, since, _with_keys(lambda keys: keys.usage.report(since)))
    if as_json:
        print(json.dumps(report))
        return
    rows = report["usage"]
    table = Table("day", "key", "name", "requests", "prompt tokens", "completion tokens", "embed ms", "LLM ms")
    for r in rows:
        table.add_row(
            r["day"],
            str(r["key_id"]),
            Text(r["key_name"] or "-"),
            str(r["requests"]),
            str(r["prompt_tokens"]),
            str(r["completion_tokens"]),
            f"{r['embed_ms']:.0f}",
            f"{r['llm_ms']:.0f}",
        )
    console.print(table)


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[int, typer.Argument(help="Key id (`rag keys list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the revoked key as JSON only.")] = False,
) -> None:
    """Revoke a key: a running `rag serve` refuses its token (401) within API_KEYS_CACHE_S seconds (5 by default).
    Exit 1 when there is no such key."""
    key = _with_keys(lambda keys: keys.revoke(key_id))
    if key is None:
        raise InputError(f"no key {key_id}; `rag keys list` shows the keys")
    if as_json:
        print(json.dumps(key.to_json()))
    else:
        console.print(
            f"revoked key {key.id} ({', '.join(key.collections)}); a running rag serve refuses it within "
            f"API_KEYS_CACHE_S={Settings().api_keys_cache_s:g} s",
            markup=False,
        )
