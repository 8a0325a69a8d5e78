"""`auditor keys create|list|revoke|gen-hmac|gen-signing-key`: API keys (the plaintext is printed once, at creation)
and the service's own secrets."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from sqlalchemy.orm import Session

from auditor.auth.keys import ROLES, ApiKeyError, create_key, list_keys, revoke_key
from auditor.cli import CliError
from auditor.commands.common import in_session, print_json, print_table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("keys", help="manage API keys")
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True, help="the customer the key acts for")
    create.add_argument("--role", required=True, choices=ROLES,
                        help="client: inference; reviewer: review queue; auditor: the tenant's trail; admin: everything; "
                             "metrics: /metrics only, every tenant's series (a Prometheus scraper)")
    create.add_argument("--name", help="a label for the key (who or what uses it)")
    create.set_defaults(func=_create)
    listing = actions.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--tenant", help="only this tenant's keys")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    listing.add_argument("--json", action="store_true", help="print the keys as JSON only")
    listing.set_defaults(func=_list)
    revoke = actions.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id", help="the key's id (see `auditor keys list`), not its secret")
    revoke.set_defaults(func=_revoke)
    gen_hmac = actions.add_parser("gen-hmac", help="print a random AUDITOR_HMAC_KEY (48 random bytes, URL-safe base64)")
    gen_hmac.set_defaults(func=_gen_hmac)
    gen_signing = actions.add_parser("gen-signing-key", help="write a new Ed25519 signing key (AUDITOR_SIGNING_KEY_FILE) "
                                                             "and print its public key")
    gen_signing.add_argument("file", type=Path, help="where to write it (PEM; never overwritten)")
    gen_signing.set_defaults(func=_gen_signing_key)


def _create(args: argparse.Namespace) -> int:
    def create(session: Session) -> tuple[str, str]:
        key, plaintext = create_key(session, tenant=args.tenant, role=args.role, name=args.name)
        return key.id, plaintext

    key_id, plaintext = in_session(create, user_errors=(ApiKeyError,), write=True)
    print(f"key id: {key_id}\ntenant: {args.tenant}\nrole: {args.role}\nkey: {plaintext}")
    print("store the key now: it is not shown again")
    return 0


def _list(args: argparse.Namespace) -> int:
    def rows(session: Session) -> list[dict[str, object]]:
        return [{"id": key.id, "prefix": key.prefix, "tenant": key.tenant, "role": key.role, "name": key.name,
                 "created_at": key.created_at, "revoked_at": key.revoked_at}
                for key in list_keys(session, tenant=args.tenant, include_revoked=args.all)]

    keys = in_session(rows)
    if args.json:
        print_json(keys)
        return 0
    print_table(("id", "prefix", "tenant", "role", "name", "status"),
                [(k["id"], f"{k['prefix']}…", k["tenant"], k["role"], k["name"],
                  f"revoked {k['revoked_at']:%Y-%m-%d}" if k["revoked_at"] else "active") for k in keys],
                empty="no keys" + ("" if args.all else " active (--all shows revoked ones)")
                      + " (create one with `auditor keys create --tenant T --role admin`)")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    in_session(lambda session: revoke_key(session, args.key_id), user_errors=(ApiKeyError,),
               write=True)
    print(f"revoked {args.key_id}")
    return 0


def _gen_hmac(_args: argparse.Namespace) -> int:
    # 48 bytes of randomness, 64 characters: above the 32-byte floor production enforces.
    print(secrets.token_urlsafe(48))
    return 0


def _gen_signing_key(args: argparse.Namespace) -> int:
    from auditor.store.signing_key import SigningKeyError, write_new_key

    try:
        key = write_new_key(args.file)
    except SigningKeyError as exc:
        raise CliError(str(exc)) from None
    print(f"wrote {args.file} (set AUDITOR_SIGNING_KEY_FILE={args.file})")
    print(f"ed25519 public key: {key.public_hex} (fingerprint {key.fingerprint}): publish it for regulators")
    return 0
