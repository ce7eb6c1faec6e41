"""``sessionstore rls``: PostgreSQL row-level security per tenant (``sessionstore.store._rls``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

__all__ = ["add_commands", "run_command"]


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_db: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``rls`` and its actions on the CLI's sub-command parser."""
    rls = commands.add_parser("rls", help="PostgreSQL row-level security: one role per tenant")
    actions = rls.add_subparsers(dest="rls_command", required=True, metavar="ACTION")
    for name, help_text in (
        ("enable", "install the tenant policies (run as the tables' owner)"),
        ("disable", "remove the policies: every role with privileges sees every row again"),
        ("grant", "make an existing role a tenant's, with the privileges the store needs"),
        ("revoke", "take a role's tenant and privileges away"),
        ("sql", "print the statements `rls enable` runs, for a schema"),
    ):
        sub = actions.add_parser(name, help=help_text)
        if name == "sql":
            sub.add_argument(
                # SUPPRESS: a --schema given before the command is not reset here
                "--schema",
                default=argparse.SUPPRESS,
                help="the schema holding the tables (default public)",
            )
            sub.add_argument(
                "--table-prefix", default=argparse.SUPPRESS, help="the store's table prefix (default none)"
            )
            continue
        add_db(sub)
        if name == "grant":
            sub.add_argument("tenant", help="the tenant id sessions are created with")
        if name in ("grant", "revoke"):
            sub.add_argument("role", help="the PostgreSQL role")


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run one ``rls`` action; returns the exit status."""
    from ..store import (
        create_engine_for_url,
        disable_row_level_security,
        enable_row_level_security,
        grant_tenant_role,
        resolve_url,
        revoke_tenant_role,
        row_level_security_sql,
        tables_for,
    )

    if args.rls_command == "sql":
        schema, prefix = args.schema or "public", args.table_prefix or ""
        for statement in row_level_security_sql(schema, table_prefix=prefix):
            print(f"{statement};", file=out)
        return 0
    url = resolve_url(args.db)
    tables = tables_for(url, table_prefix=args.table_prefix, schema=args.schema)  # --table-prefix, --schema
    prefix, schema = tables.prefix, tables.schema
    engine = create_engine_for_url(url, create=False)
    try:
        if args.rls_command == "enable":
            enable_row_level_security(engine, table_prefix=prefix, schema=schema)
            done = "row-level security enabled"
        elif args.rls_command == "disable":
            disable_row_level_security(engine, table_prefix=prefix, schema=schema)
            done = "row-level security disabled"
        elif args.rls_command == "grant":
            grant_tenant_role(engine, args.tenant, args.role, table_prefix=prefix, schema=schema)
            done = f"role {args.role} is tenant {args.tenant}"
        else:
            revoke_tenant_role(engine, args.role, table_prefix=prefix, schema=schema)
            done = f"role {args.role} has no tenant"
    finally:
        engine.dispose()
    print(f"{engine.url.render_as_string(hide_password=True)}: {done}", file=out)
    return 0
