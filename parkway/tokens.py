"""Principals' bearer tokens: how one is made and how it is stored (the API, the CLI and the store share these)."""

from __future__ import annotations

import hashlib
import secrets


def hash_token(token: str) -> str:
    """Tokens are random and high-entropy: a plain SHA-256 is what is stored and looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "pk_" + secrets.token_urlsafe(32)
