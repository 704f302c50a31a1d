"""Encryption of sensitive answer fields at rest: Fernet, keyed from PARKWAY_SECRET_KEY by HKDF."""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from parkway.errors import ParkwayError
from parkway.settings import get_settings


class SecretUnreadable(ParkwayError):
    """Raised when a sealed value cannot be decrypted with the current key (key changed or data damaged)."""


@lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"parkway sensitive fields v1").derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def seal(value: Any) -> str:
    """Encrypt a JSON value; the token carries no plaintext."""
    token = _fernet(get_settings().resolved_secret_key()).encrypt(json.dumps(value).encode())
    return token.decode()


def unseal(token: str) -> Any:
    try:
        plain = _fernet(get_settings().resolved_secret_key()).decrypt(token.encode())
    except InvalidToken:
        raise SecretUnreadable("a sensitive answer cannot be decrypted with the current PARKWAY_SECRET_KEY") from None
    return json.loads(plain)


def split_sensitive(value: Any, sensitive: list[str]) -> tuple[Any, str | None]:
    """(what may be stored in clear, the sealed sensitive part or None)."""
    if not sensitive:
        return value, None
    if isinstance(value, dict):
        secret = {k: value[k] for k in sensitive if k in value}
        clear = {k: v for k, v in value.items() if k not in sensitive}
        return clear, (seal(secret) if secret else None)
    return None, seal({"__value__": value})


def join_sensitive(clear: Any, token: str | None) -> Any:
    """The value as the consuming continuation sees it (clear fields plus decrypted sensitive ones)."""
    if token is None:
        return clear
    secret = unseal(token)
    if "__value__" in secret and len(secret) == 1:
        return secret["__value__"]
    return {**(clear or {}), **secret}
