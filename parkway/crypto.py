"""Keys derived from PARKWAY_SECRET_KEY by HKDF, one per purpose: Fernet for sensitive answer fields at rest,
Ed25519 for the seals of the event log (docs/operations.md, "The seal").

``cryptography`` is imported when a key is first used, not with this module: every worker child imports
this module (the store joins sensitive values here) and most never meet a sensitive value or a seal, and
the library's bindings cost each process about 8 MB of memory (issue 42 item 5)."""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from parkway.errors import ParkwayError
from parkway.settings import get_settings

if TYPE_CHECKING:
    from cryptography.fernet import Fernet
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


class SecretUnreadable(ParkwayError):
    """Raised when a sealed value cannot be decrypted with the current key (key changed or data damaged)."""


def derived_key(secret_key: str, purpose: bytes) -> bytes:
    """32 bytes of key for ``purpose`` alone: knowing one purpose's key tells nothing of another's."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret_key.encode())


@lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    from cryptography.fernet import Fernet

    return Fernet(base64.urlsafe_b64encode(derived_key(secret_key, b"parkway sensitive fields v1")))


@lru_cache(maxsize=4)
def _seal_key(secret_key: str) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(derived_key(secret_key, b"parkway event log seal v1"))


def sign_seal(message: bytes) -> str:
    """The Ed25519 signature of ``message`` with the seal key, in hex."""
    return _seal_key(get_settings().resolved_secret_key()).sign(message).hex()


def seal_public_key() -> str:
    """The public half of the seal key, in hex: what an auditor verifies seals with (it cannot sign)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = _seal_key(get_settings().resolved_secret_key()).public_key()
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def signed_by(public_key_hex: str, message: bytes, signature_hex: str) -> bool:
    """Whether ``signature_hex`` is the signature of ``message`` by the key ``public_key_hex``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex)).verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def seal(value: Any) -> str:
    """Encrypt a JSON value; the token carries no plaintext."""
    token = _fernet(get_settings().resolved_secret_key()).encrypt(json.dumps(value).encode())
    return token.decode()


def unseal(token: str) -> Any:
    from cryptography.fernet import InvalidToken

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
