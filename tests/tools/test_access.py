"""`tools.access`: group names, roles, a caller's access and the SQL that starts a restricted read."""

from __future__ import annotations

import pytest

from tools.access import (
    NOBODY,
    PUBLIC_GROUP,
    UNRESTRICTED,
    Access,
    AccessError,
    Role,
    caller_access,
    check_group,
    check_groups,
    check_role,
    document_groups,
)


def test_group_names_are_checked_and_named_in_the_error() -> None:
    assert check_group("  /engineering/platform ") == "/engineering/platform"
    for bad in ("", "   ", "a\nb", "x" * 257):
        with pytest.raises(AccessError, match="group"):
            check_group(bad)
    with pytest.raises(AccessError, match="one string"):
        check_groups("team")


def test_a_document_without_groups_is_public() -> None:
    assert document_groups(None) == (PUBLIC_GROUP,)
    assert document_groups(["b", "a", "a"]) == ("a", "b")


def test_roles_include_the_ones_before() -> None:
    assert check_role("uploader") is Role.UPLOADER
    assert Role.ADMIN.includes(Role.READER) and not Role.READER.includes(Role.UPLOADER)
    with pytest.raises(AccessError, match="reader, uploader, admin"):
        check_role("owner")


def test_caller_access_adds_the_public_group_and_drops_invalid_names() -> None:
    access = caller_access(["eng", "", "bad\x00"])
    assert access.groups == frozenset({"eng", PUBLIC_GROUP})
    assert access.readable(["eng", "hr"]) and access.readable([PUBLIC_GROUP])
    assert not access.readable(["hr"])
    assert UNRESTRICTED.readable(["hr"]) and not NOBODY.readable(["hr"])


def test_cache_keys_differ_per_permission_set() -> None:
    assert UNRESTRICTED.key == "*"
    assert caller_access(["a"]).key == caller_access(["a", "a"]).key
    assert caller_access(["a"]).key != caller_access(["b"]).key != NOBODY.key


def test_the_set_local_sql_cannot_be_escaped_by_a_group_name() -> None:
    assert UNRESTRICTED.set_local_sql() == ""
    sql = Access(frozenset({"x'); DROP TABLE documents; --", 'q"uote\\'})).set_local_sql()
    assert "DROP" not in sql and "'" not in sql.split("convert_from(")[1].split("::bytea")[0].strip("'\\x")
    assert sql.startswith("SET LOCAL ROLE rag_reader; SELECT set_config('rag.groups', convert_from('\\x")
    literal = bytes.fromhex(sql.split("'\\x")[1].split("'")[0]).decode()
    assert literal == '{"q\\"uote\\\\","x\'); DROP TABLE documents; --"}'
