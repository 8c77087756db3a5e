"""Organisations, users, API keys and tokens in the store."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..auth.credentials import ApiCredentials, BasicCredentials, TokenCredentials
from ..auth.secrets import display_prefix, hash_secret, new_api_key, new_token
from ..auth.visibility import Principal
from ..errors import Conflict, NotFound, Unauthorized
from .tables import api_keys, auth_state, organisations, tokens, users

log = logging.getLogger(__name__)


CacheKey = tuple[str, str | None, bool]
"""Where the credential cache keeps an answer: (key or token hash, user name or None, whether
it is a bearer token): a token and an API key of the same text never share an entry."""

Checked = ApiCredentials | TokenCredentials
"""What the credential cache answers for: an API key (Basic or Token) or a bearer token."""


def _retrieved(task: asyncio.Task[Principal]) -> None:
    """A background check's outcome is in the cache; its error is only worth a debug line."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("background credential check failed: %r", task.exception())


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A websocket token and when it expires (unix s)."""

    token: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A user as listings show it."""

    id: int
    name: str
    organisation: str
    is_admin: bool
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as ``ridecast users keys`` lists it (never the key itself)."""

    id: int
    prefix: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


AUTH_CACHE_S = 5.0
"""How long a successful credential check is reused in a process. A revocation clears the
cache at once in the process that revoked, and in every other process as soon as it sees
the revocation epoch move (``RIDECAST_REVOCATION_POLL_S``).

An entry past half that age is checked again in the background when it is used (one check per
credential at a time), so that a steady producer keeps finding a fresh entry instead of all
its connections missing together every few seconds and queueing a store read each."""

LAST_USE_EVERY_S = 60.0
"""A key's ``last_used_at`` is written at most this often per process (a write per request
would compete with the event log for the database)."""


class AccountStore:
    """Creates users and keys, checks credentials, issues and checks tokens."""

    def __init__(self, engine: AsyncEngine, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._clock = clock  # ages the credential cache's entries
        # CacheKey -> (principal, checked at); saves a query per request.
        self._auth_cache: dict[CacheKey, tuple[Principal, float]] = {}
        # The credential checks running now, by cache key, with the generation they started
        # in: concurrent misses share one.
        self._checking: dict[CacheKey, tuple[asyncio.Task[Principal], int]] = {}
        # Bumped by every clear: a check that started before it does not fill the cache.
        self._generation = 0
        self._last_use_written: dict[int, float] = {}

    def clear_cache(self) -> None:
        """Forget every cached credential check (a revocation happened somewhere)."""
        self._auth_cache.clear()
        self._generation += 1

    @staticmethod
    async def _bump_epoch(conn: AsyncConnection) -> None:
        await conn.execute(
            update(auth_state).where(auth_state.c.id == 1)
            .values(revocation_epoch=auth_state.c.revocation_epoch + 1)
        )

    async def revocation_epoch(self) -> int:
        """The store's revocation counter: it moves with every revocation, in any process."""
        async with self._engine.connect() as conn:
            value = await conn.scalar(
                select(auth_state.c.revocation_epoch).where(auth_state.c.id == 1)
            )
        return int(value or 0)

    async def revoked_tokens(self, token_hashes: Iterable[str]) -> set[str]:
        """Those of ``token_hashes`` that no longer authorise a stream (revoked, expired)."""
        wanted = list(token_hashes)
        found: set[str] = set()
        now = time.time()
        async with self._engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                valid = await conn.execute(
                    select(tokens.c.token_hash)
                    .join(users, users.c.id == tokens.c.user_id)
                    .where(
                        tokens.c.token_hash.in_(chunk),
                        tokens.c.expires_at > now,
                        users.c.revoked_at.is_(None),
                    )
                )
                found.update(set(chunk) - {row[0] for row in valid})
        return found

    async def _org_id(self, conn: AsyncConnection, name: str) -> int:
        found = await conn.scalar(select(organisations.c.id).where(organisations.c.name == name))
        if found is not None:
            return int(found)
        result = await conn.execute(
            insert(organisations).values(name=name, created_at=time.time())
        )
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    async def create_user(
        self, name: str, org: str, *, is_admin: bool = False
    ) -> tuple[Principal, str]:
        """Create a user (and its organisation if new); returns it and its first API key."""
        now = time.time()
        key = new_api_key()
        try:
            async with self._engine.begin() as conn:
                org_id = await self._org_id(conn, org)
                result = await conn.execute(
                    insert(users).values(
                        name=name, org_id=org_id, is_admin=is_admin, created_at=now
                    )
                )
                user_id = int(result.inserted_primary_key[0])  # type: ignore[index]
                await conn.execute(
                    insert(api_keys).values(
                        user_id=user_id,
                        key_hash=hash_secret(key),
                        prefix=display_prefix(key),
                        created_at=now,
                    )
                )
        except IntegrityError:
            raise Conflict(f"a user named {name!r} exists already", code="user_exists") from None
        return Principal(user_id, name, org_id, is_admin), key

    async def new_key(self, name: str) -> str:
        """Issue another API key for an existing user."""
        key = new_api_key()
        async with self._engine.begin() as conn:
            user_id = await conn.scalar(
                select(users.c.id).where(users.c.name == name, users.c.revoked_at.is_(None))
            )
            if user_id is None:
                raise NotFound(f"no active user named {name!r}")
            await conn.execute(
                insert(api_keys).values(
                    user_id=user_id,
                    key_hash=hash_secret(key),
                    prefix=display_prefix(key),
                    created_at=time.time(),
                )
            )
        return key

    @staticmethod
    async def _user_id(conn: AsyncConnection, name: str) -> int:
        user_id = await conn.scalar(select(users.c.id).where(users.c.name == name))
        if user_id is None:
            raise NotFound(f"no user named {name!r}")
        return int(user_id)

    async def revoke_user(self, name: str) -> None:
        """Revoke a user: its keys, tokens and open streams stop working at once."""
        self.clear_cache()
        now = time.time()
        async with self._engine.begin() as conn:
            user_id = await self._user_id(conn, name)
            await conn.execute(update(users).where(users.c.id == user_id).values(revoked_at=now))
            await conn.execute(
                update(api_keys)
                .where(api_keys.c.user_id == user_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            await conn.execute(
                update(tokens).where(tokens.c.user_id == user_id).values(expires_at=now)
            )
            await self._bump_epoch(conn)

    async def revoke_key(self, name: str, key: str) -> KeyInfo:
        """Revoke one API key of user ``name`` (by id or display prefix) and its tokens.

        The user and its other keys keep working.
        """
        self.clear_cache()
        now = time.time()
        async with self._engine.begin() as conn:
            user_id = await self._user_id(conn, name)
            match = api_keys.c.prefix == key
            if key.isdigit():
                match = or_(match, api_keys.c.id == int(key))
            rows = (await conn.execute(
                select(api_keys.c.id).where(api_keys.c.user_id == user_id, match)
            )).all()
            if len(rows) != 1:
                raise NotFound(
                    f"user {name!r} has no key {key!r}" if not rows else
                    f"{key!r} names {len(rows)} keys of {name!r}: give the key id",
                    code="not_found",
                )
            key_id = int(rows[0][0])
            await conn.execute(
                update(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            await conn.execute(
                update(tokens).where(tokens.c.key_id == key_id, tokens.c.expires_at > now)
                .values(expires_at=now)
            )
            await self._bump_epoch(conn)
        return next(k for k in await self.list_keys(name) if k.id == key_id)

    async def list_keys(self, name: str) -> list[KeyInfo]:
        """The API keys of user ``name``: display prefix, creation, last use, revocation."""
        async with self._engine.connect() as conn:
            user_id = await self._user_id(conn, name)
            rows = (await conn.execute(
                select(api_keys.c.id, api_keys.c.prefix, api_keys.c.created_at,
                       api_keys.c.last_used_at, api_keys.c.revoked_at)
                .where(api_keys.c.user_id == user_id).order_by(api_keys.c.id)
            )).all()
        return [KeyInfo(*row) for row in rows]

    async def list_users(self) -> list[UserInfo]:
        query = select(
            users.c.id,
            users.c.name,
            organisations.c.name.label("organisation"),
            users.c.is_admin,
            users.c.created_at,
            users.c.revoked_at,
        ).join(organisations, organisations.c.id == users.c.org_id).order_by(users.c.id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [UserInfo(*row) for row in rows]

    async def get_user(self, name: str) -> Principal | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(users.c.id, users.c.name, users.c.org_id, users.c.is_admin).where(
                        users.c.name == name, users.c.revoked_at.is_(None)
                    )
                )
            ).first()
        return Principal(row.id, row.name, row.org_id, bool(row.is_admin)) if row else None

    @staticmethod
    def cache_key(creds: Checked) -> CacheKey:
        """Where the credential cache keeps the answer for ``creds`` (the key's or token's
        hash, and the user name with Basic): a caller that sees the same credentials again
        may keep it (``cached_principal``'s ``key``)."""
        if isinstance(creds, TokenCredentials):
            return (hash_secret(creds.token), None, True)
        return (hash_secret(creds.api_key),
                creds.username if isinstance(creds, BasicCredentials) else None, False)

    def cached_principal(self, creds: Checked,
                         key: CacheKey | None = None) -> Principal | None:
        """``authenticate``'s answer when its cache holds a fresh one, else None, without
        I/O: the same cache (keyed by ``cache_key(creds)``, which ``key`` is when given;
        emptied by every revocation). An entry past half of ``AUTH_CACHE_S`` is checked
        again in the background (see there)."""
        cache_key = self.cache_key(creds) if key is None else key
        cached = self._auth_cache.get(cache_key)
        if cached is None:
            return None
        age = self._clock() - cached[1]
        if age >= AUTH_CACHE_S:
            return None
        if age >= AUTH_CACHE_S / 2 and cache_key not in self._checking:
            # Outside an event loop (RuntimeError) the entry just ages out.
            with contextlib.suppress(RuntimeError):
                self._check(cache_key, creds).add_done_callback(_retrieved)
        return cached[0]

    async def authenticate(self, creds: Checked) -> Principal:
        """The user whose API key or bearer token ``creds`` carries; raises
        ``Unauthorized``. A token's entry ages out at its expiry at the latest, and a
        revocation (of its user or of the key it was issued from) clears it as any other."""
        cached = self.cached_principal(creds)
        if cached is not None:
            return cached
        cache_key = self.cache_key(creds)
        checking = self._checking.get(cache_key)
        # A check that started before a revocation may have read what it revoked: not joined.
        check = (checking[0] if checking is not None and checking[1] == self._generation
                 else self._check(cache_key, creds))
        # Shielded: a caller that goes away does not cancel the check the others wait for.
        return await asyncio.shield(check)

    def _check(self, cache_key: CacheKey, creds: Checked) -> asyncio.Task[Principal]:
        """Start the store's check of ``creds``; it caches its answer unless the cache was
        cleared meanwhile (raises RuntimeError outside an event loop)."""
        generation = self._generation
        started = self._clock()

        async def check() -> Principal:
            try:
                if isinstance(creds, TokenCredentials):
                    principal, expires_at = await self.check_token(creds.token)
                    # Aged so that the entry is stale by the token's expiry.
                    checked = min(started, self._clock() + expires_at - time.time()
                                  - AUTH_CACHE_S)
                else:
                    principal, checked = await self._authenticate(creds, cache_key[0]), started
            except Unauthorized:
                self._auth_cache.pop(cache_key, None)
                raise
            if self._generation == generation:
                if len(self._auth_cache) > 10_000:
                    self._auth_cache.clear()
                self._auth_cache[cache_key] = (principal, checked)
            return principal

        task = asyncio.get_running_loop().create_task(check())
        self._checking[cache_key] = (task, generation)

        def done(_task: asyncio.Task[Principal]) -> None:
            if self._checking.get(cache_key, (None, 0))[0] is task:
                del self._checking[cache_key]

        task.add_done_callback(done)
        return task

    async def cancel_checks(self) -> None:
        """Cancel the credential checks still running, and wait for them (before the engine
        that they read closes)."""
        tasks = [task for task, _generation in self._checking.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _authenticate(self, creds: ApiCredentials, key_hash: str) -> Principal:
        query = (
            select(users.c.id, users.c.name, users.c.org_id, users.c.is_admin,
                   api_keys.c.id.label("key_id"))
            .join(api_keys, api_keys.c.user_id == users.c.id)
            .where(
                api_keys.c.key_hash == key_hash,
                api_keys.c.revoked_at.is_(None),
                users.c.revoked_at.is_(None),
            )
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        # With Basic, the name must match the key's owner too (compared in constant time).
        if row is None or (
            isinstance(creds, BasicCredentials)
            and not hmac.compare_digest(row.name.encode(), creds.username.encode())
        ):
            raise Unauthorized("unknown user name or API key", code="invalid_credentials")
        await self._note_use(int(row.key_id))
        return Principal(row.id, row.name, row.org_id, bool(row.is_admin), int(row.key_id))

    async def _note_use(self, key_id: int) -> None:
        now = time.time()
        if now - self._last_use_written.get(key_id, 0.0) < LAST_USE_EVERY_S:
            return
        if len(self._last_use_written) > 10_000:
            self._last_use_written.clear()
        self._last_use_written[key_id] = now
        async with self._engine.begin() as conn:
            await conn.execute(
                update(api_keys).where(api_keys.c.id == key_id).values(last_used_at=now)
            )

    async def issue_token(self, principal: Principal, ttl_s: float) -> IssuedToken:
        """A new websocket token for ``principal``, valid for ``ttl_s`` seconds."""
        token = new_token()
        now = time.time()
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(tokens).values(
                    token_hash=hash_secret(token),
                    user_id=principal.user_id,
                    key_id=principal.key_id,
                    created_at=now,
                    expires_at=now + ttl_s,
                )
            )
        return IssuedToken(token, now + ttl_s)

    async def check_token(self, token: str) -> tuple[Principal, float]:
        """The user a (normalised) token belongs to and its expiry; raises ``Unauthorized``."""
        query = (
            select(
                users.c.id, users.c.name, users.c.org_id, users.c.is_admin, tokens.c.expires_at
            )
            .join(tokens, tokens.c.user_id == users.c.id)
            .where(tokens.c.token_hash == hash_secret(token), users.c.revoked_at.is_(None))
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise Unauthorized("unknown token", code="token_unknown")
        if row.expires_at <= time.time():
            raise Unauthorized(
                "the token has expired: get a new one from /api/v2/user/token/",
                code="token_expired",
            )
        return Principal(row.id, row.name, row.org_id, bool(row.is_admin)), float(row.expires_at)
