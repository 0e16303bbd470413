"""Grants of groups to collections held in memory: `tools.store.grants.PostgresGrants` with no server, for the
interfaces' tests (the contract suite `tests/contracts/test_grants.py` holds it to the table's behaviour)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from tools.access import Role
from tools.records import Grant
from tools.store.grants import checked_grant, highest_roles, valid_groups


@dataclass
class InMemoryGrants:
    """The grants by (group, collection)."""

    grants: dict[tuple[str, str], Grant] = field(default_factory=dict)

    async def roles_for(self, groups: Iterable[str]) -> Mapping[str, Role]:
        """See `PostgresGrants.roles_for`."""
        names = set(valid_groups(groups))
        return highest_roles((g.collection, g.role) for g in self.grants.values() if g.group in names)

    async def grant(self, group: str, collection: str, role: Role | str) -> Grant:
        """See `PostgresGrants.grant`."""
        group, collection, checked = checked_grant(group, collection, str(role))
        held = self.grants.get((group, collection))
        made = Grant(group, collection, checked, datetime.now(UTC)) if held is None else replace(held, role=checked)
        self.grants[group, collection] = made
        return made

    async def revoke(self, group: str, collection: str) -> bool:
        """See `PostgresGrants.revoke`."""
        return self.grants.pop((group.strip(), collection), None) is not None

    async def list(self) -> list[Grant]:
        """See `PostgresGrants.list`."""
        return [self.grants[k] for k in sorted(self.grants)]
