"""The access routes: the grants of groups to collections (`GET`/`PUT /v1/access/grants`, `DELETE
/v1/access/grants/{group}/{collection}`: the admin key only, 403 `admin_only` for anyone else) and the groups allowed
to read a stored document (`PUT /v1/documents/{doc_id}/groups`: the admin key, or a caller whose role in the
document's collection is admin). A document the caller cannot read answers exactly like a missing one (404
`document_not_found`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from agent.core.errors import InputError
from agent.core.failures import Failure
from agent.core.grants import GrantStore, checked_grant
from agent.http.deps import CALLER, Caller, CallerIdentity, Rag, app_state
from agent.http.errors import ERROR_RESPONSES, ApiError, ErrorBody, error_response
from tools.access import AccessError, Role, check_groups, document_groups
from tools.scope import DEFAULT_COLLECTION, ScopeError

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES)


def get_grants(request: Request) -> GrantStore:
    """The grants the app's lifespan opened (`AppState.grants`), changeable (`GrantStore`).

    Raises:
        HTTPException: 503 for an app without them (a test's `Services` without `grants`) or with read-only ones.
    """
    grants = app_state(request.app).grants
    if not isinstance(grants, GrantStore):  # None, or grants that are read only
        raise HTTPException(503, "this server keeps no access grants", headers={"Retry-After": "5"})
    return grants


Grants = Annotated[GrantStore, Depends(get_grants)]


def require_admin(caller: CallerIdentity) -> None:
    """Refuse every caller but the admin (`API_KEY`, or a server without keys).

    Raises:
        ApiError: 403 `admin_only`.
    """
    if caller.collections is not None:
        raise ApiError(403, "admin_only", "the access grants are managed with the admin key (API_KEY) only")


def given_groups(caller: CallerIdentity, collection: str, groups: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """The groups a write gives its documents (a list, or one comma-separated string; None: none given), checked:
    the caller may give only groups it is in (`caller.access`), unless it holds the admin role in `collection` (the
    admin key, a key scoped to collections, a group granted admin there).

    Raises:
        InputError: an invalid group name (422 `bad_request`).
        ApiError: 403 `forbidden_group` naming a group the caller is not in.
    """
    if groups is None:
        return None
    names = [g for g in groups.split(",") if g.strip()] if isinstance(groups, str) else list(groups)
    try:
        checked = check_groups(names)
    except AccessError as exc:
        raise InputError(str(exc)) from None
    role = caller.role_in(collection)
    if role is not None and role.includes(Role.ADMIN):
        return checked
    mine = caller.access.groups or frozenset()
    outside = [g for g in checked if g not in mine]
    if outside:
        raise ApiError(
            403,
            "forbidden_group",
            f"group {outside[0]!r}: you may give documents only groups you are in (or be an admin of {collection!r})",
        )
    return checked


class GrantIn(BaseModel):
    """Body of `PUT /v1/access/grants`."""

    group: str = Field(description="The group (as the identity provider's groups claim, or a key's group).")
    collection: str = Field(description="The collection its members may use.")
    role: str = Field(default=Role.READER.value, description="`reader`, `uploader` or `admin`.")


@router.get("/v1/access/grants")
async def list_grants(caller: Caller, grants: Grants) -> dict[str, list[dict[str, Any]]]:
    """Every grant, by group then collection: `{"grants": [{"group", "collection", "role", "created_at"}]}`."""
    require_admin(caller)
    return {"grants": [g.to_json() for g in await grants.list()]}


@router.put("/v1/access/grants")
async def put_grant(body: GrantIn, caller: Caller, grants: Grants) -> dict[str, Any]:
    """Give a group a role in a collection (replacing the role it held there); the grant
    `{"group", "collection", "role", "created_at"}`."""
    require_admin(caller)
    try:
        checked = checked_grant(body.group, body.collection, body.role)
    except (AccessError, ScopeError) as exc:
        raise InputError(str(exc)) from None
    return (await grants.grant(*checked)).to_json()


@router.delete(
    "/v1/access/grants/{group:path}/{collection}",
    responses={404: {"model": ErrorBody, "description": "`grant_not_found`."}},
)
async def delete_grant(group: str, collection: str, caller: Caller, grants: Grants) -> Any:
    """Take a group's role in a collection away (group names may hold `/`): `{"group", "collection"}`; 404
    `grant_not_found` when it held none."""
    require_admin(caller)
    if not await grants.revoke(group, collection):
        return error_response(Failure("grant_not_found", f"{group!r} holds no role in {collection!r}"))
    return {"group": group.strip(), "collection": collection}


class GroupsIn(BaseModel):
    """Body of `PUT /v1/documents/{doc_id}/groups`."""

    groups: list[str] = Field(description="The groups allowed to read the document; empty: every caller.")
    collection: str | None = Field(default=None, description="The document's collection; default `default`.")


@router.put(
    "/v1/documents/{doc_id:path}/groups",
    responses={404: {"model": ErrorBody, "description": "`document_not_found` (missing, or not readable by you)."}},
)
async def put_document_groups(doc_id: str, body: GroupsIn, rag: Rag, caller: Caller) -> Any:
    """Set the groups allowed to read a stored document (its chunks too; nothing re-embedded; cached answers built
    from its collection are not served again): `{"doc_id", "collection", "groups"}` (the groups stored: `everyone`
    for none). Needs the admin key or the admin
    role in the collection (403 `admin_only`)."""
    collection = caller.visible(body.collection or DEFAULT_COLLECTION)
    assert collection is not None
    name = collection[0]
    role = caller.role_in(name)
    if role is None or not role.includes(Role.ADMIN):
        raise ApiError(403, "admin_only", f"changing documents' groups needs the admin role in {name!r}")
    if not await rag.set_document_groups(doc_id, body.groups, name, access=caller.access):
        return error_response(Failure("document_not_found", f"document {doc_id!r} is not stored in {name!r}"))
    return {"doc_id": doc_id, "collection": name, "groups": list(document_groups(body.groups))}
