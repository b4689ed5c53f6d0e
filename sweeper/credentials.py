"""Credentials stay in the environment: what to refuse in a URI, and how to print one safely.

Stores and tracking servers read their secrets from the environment (AWS_*, MLFLOW_TRACKING_*),
so no config value needs one.  A value that holds one anyway is refused by validation, and every
URI that reaches a log, an MLflow param or a manifest goes through `redact` first.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

#: Words in a name (query parameter, environment variable) that make its value a credential.
CREDENTIAL_WORDS = ("KEY", "SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL")


def looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in CREDENTIAL_WORDS)


def redact(uri: str) -> str:
    """The URI with its password (or http user, where tokens hide) and credential-like query
    values replaced by ***; anything that is not a URI is returned as it is."""
    parts = urlsplit(uri)
    if not parts.scheme or not (parts.netloc or parts.query):
        return uri
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    elif parts.username is not None and parts.scheme in ("http", "https"):
        netloc = netloc.replace(f"{parts.username}@", "***@", 1)
    query = "&".join(f"{k}={'***' if looks_secret(k) else v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


#: `scheme://user:password@` anywhere in a string (a pip index URL inside an argument list…).
EMBEDDED_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^@\s/]+@")


def redact_tree(node: Any) -> Any:
    """A config (dicts, lists, strings) with every URI redacted and every embedded password and
    credential-named value masked, fit for MLflow params and `sweep.json`."""
    if isinstance(node, dict):
        return {key: "***" if looks_secret(str(key)) and isinstance(value, str) and value
                else redact_tree(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [redact_tree(item) for item in node]
    if isinstance(node, str):
        return redact(EMBEDDED_PASSWORD.sub(r"\1***@", node))
    return node


def uri_credentials(uri: str) -> list[str]:
    """What in `uri` is a credential: a password, an http(s) user (often a token), a query key."""
    parts = urlsplit(uri)
    found = []
    if parts.password is not None:
        found.append("a password")
    elif parts.username is not None and parts.scheme in ("http", "https"):
        found.append("a user name (often a token)")
    found += [f"query parameter {key!r}" for key, _ in parse_qsl(parts.query, True) if looks_secret(key)]
    return found
