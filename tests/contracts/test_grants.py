"""`agent.core.grants.GrantStore`: the in-memory grants and Postgres' `access_grants` answer alike (one role per group
and collection, the highest role per collection over several groups, revocation, listing order, refusals)."""

from __future__ import annotations

import pytest

from agent.core.grants import GrantStore
from tools.access import AccessError, Role
from tools.scope import ScopeError


async def test_a_grant_is_listed_and_gives_its_role(grant_book: GrantStore) -> None:
    made = await grant_book.grant("eng", "handbook", Role.UPLOADER)
    assert (made.group, made.collection, made.role) == ("eng", "handbook", Role.UPLOADER)
    assert [(g.group, g.collection, g.role) for g in await grant_book.list()] == [("eng", "handbook", Role.UPLOADER)]
    assert await grant_book.roles_for(["eng"]) == {"handbook": Role.UPLOADER}
    assert await grant_book.roles_for(["sales"]) == {}
    assert await grant_book.roles_for([]) == {}


async def test_granting_again_replaces_the_role(grant_book: GrantStore) -> None:
    await grant_book.grant("eng", "handbook", "admin")
    again = await grant_book.grant("eng", "handbook", "reader")
    assert again.role is Role.READER
    assert len(await grant_book.list()) == 1
    assert await grant_book.roles_for(["eng"]) == {"handbook": Role.READER}


async def test_the_highest_role_of_several_groups_wins_per_collection(grant_book: GrantStore) -> None:
    await grant_book.grant("eng", "handbook", "reader")
    await grant_book.grant("ops", "handbook", "admin")
    await grant_book.grant("ops", "runbooks", "uploader")
    await grant_book.grant("sales", "deals", "reader")
    roles = await grant_book.roles_for(["eng", "ops", "not a granted group", "\x00bad"])
    assert roles == {"handbook": Role.ADMIN, "runbooks": Role.UPLOADER}
    listed = [(g.group, g.collection) for g in await grant_book.list()]
    assert listed == [("eng", "handbook"), ("ops", "handbook"), ("ops", "runbooks"), ("sales", "deals")]


async def test_revoke_says_whether_a_role_was_held(grant_book: GrantStore) -> None:
    await grant_book.grant("eng", "handbook", "reader")
    assert await grant_book.revoke("eng", "handbook") is True
    assert await grant_book.revoke("eng", "handbook") is False
    assert await grant_book.roles_for(["eng"]) == {}
    assert await grant_book.list() == []


async def test_invalid_names_and_roles_are_refused(grant_book: GrantStore) -> None:
    with pytest.raises(AccessError, match="role 'owner'"):
        await grant_book.grant("eng", "handbook", "owner")
    with pytest.raises(AccessError, match="group"):
        await grant_book.grant("  ", "handbook", "reader")
    with pytest.raises(ScopeError, match="collection 'Bad Name'"):
        await grant_book.grant("eng", "Bad Name", "reader")
    assert await grant_book.list() == []


async def test_group_names_are_stored_stripped_and_keep_their_case(grant_book: GrantStore) -> None:
    made = await grant_book.grant(" /Engineering/Platform ", "handbook", "reader")
    assert made.group == "/Engineering/Platform"
    assert await grant_book.roles_for(["/Engineering/Platform"]) == {"handbook": Role.READER}
    assert await grant_book.roles_for(["/engineering/platform"]) == {}
