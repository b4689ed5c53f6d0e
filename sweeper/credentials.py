"""Credentials stay in the environment: what to refuse, and how to print anything safely.

Stores and tracking servers read their secrets from the environment (AWS_*, MLFLOW_TRACKING_*),
so no config value, and no URI, needs one.  A URI that holds one anyway is refused wherever it
comes from (the config, `MLFLOW_TRACKING_URI`, a command-line flag), and everything the sweep
writes or prints that could carry one goes through this module first: `redact` for a URI,
`redact_tree` for a config (every `runtime_env` environment value is masked, whatever its
name: a name is no proof that its value is harmless), `scrub` for free text (exception messages,
tracebacks, echoed overrides).  Each also masks the environment's secrets by value
(`secret_values`), which reach a config by interpolation (`${oc.env:…}`) where no key's name
shows them.  This is the one home of these rules.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

#: Words in a name (query parameter, environment variable) that make its value a credential.
#: "PASS" covers PASSWORD, PASSWD and the DB_PASS kind.
CREDENTIAL_WORDS = ("KEY", "SECRET", "PASS", "TOKEN", "CREDENTIAL", "AUTH", "COOKIE")

MASK = "***"

#: The config key whose every value is an environment variable's value (`cluster.runtime_env`).
ENV_VARS_KEY = "env_vars"


def looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in CREDENTIAL_WORDS)


#: Values shorter than this are not masked by value (a 3-letter "secret" would mask every
#: occurrence of those letters); credentials are far longer.
MIN_SECRET_LENGTH = 8
#: Names that match `CREDENTIAL_WORDS` but hold a setting or a path, not a secret.
_SETTING_SUFFIXES = ("_MODE", "_FILE", "_PATH", "_DIR", "_ENABLED", "_TYPE", "_URI", "_URL",
                     "_REGION", "_PROFILE", "_ID", "_SOCK", "_SOCKET", "AUTHORITY")


def secret_values() -> dict[str, str]:
    """The environment's secrets by value, {value: variable name}: each variable whose name looks
    secret (`looks_secret`: AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_PASSWORD, …), not a setting's
    (`_SETTING_SUFFIXES`: RAY_AUTH_MODE, …), and at least `MIN_SECRET_LENGTH` long.  Values
    arrive where names cannot see them (`name=${oc.env:AWS_SECRET_ACCESS_KEY}`), so they are
    masked wherever they appear (`hide_secret_values`) and refused in names and paths."""
    found = {}
    for name, value in os.environ.items():
        if (looks_secret(name) and not name.upper().endswith(_SETTING_SUFFIXES)
                and len(value) >= MIN_SECRET_LENGTH):
            found[value] = name
    return found


def hide_secret_values(text: str) -> str:
    """`text` with every value of `secret_values` replaced by ***, longest first."""
    for value in sorted(secret_values(), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def secret_in(text: str) -> str | None:
    """The name of the environment variable whose secret value `text` holds, or None."""
    for value, name in secret_values().items():
        if value in text:
            return name
    return None


def redact(uri: str) -> str:
    """The URI with its password (or http user, where tokens hide) and credential-like query
    values replaced by ***; anything that is not a URI is returned as it is."""
    uri = hide_secret_values(uri)
    parts = urlsplit(uri)
    if not parts.scheme or not (parts.netloc or parts.query):
        return uri
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
    elif parts.username is not None and parts.scheme in ("http", "https"):
        netloc = netloc.replace(f"{parts.username}@", f"{MASK}@", 1)
    query = "&".join(f"{k}={MASK if looks_secret(k) else v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


#: `scheme://user:password@` anywhere in a string (a pip index URL inside an argument list, a
#: database URL inside an exception message …).
_EMBEDDED_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^@\s/]*@")
#: `http(s)://user@`: an http user is often a token.
_EMBEDDED_HTTP_USER = re.compile(r"(\bhttps?://)[^/\s:@]+@", re.IGNORECASE)
_WORDS = "|".join(word.lower() for word in CREDENTIAL_WORDS)
#: AWS_SECRET_ACCESS_KEY=…, token=…; not Hydra's own "key=value".
_SECRET_ASSIGNMENT = re.compile(rf"(\b(?!key=)\w*(?:{_WORDS})\w*=)[^&\s'\",}}\]]+", re.IGNORECASE)
#: 'DB_PASS': '…' in a mapping's repr (a config or an environment in an exception message).
_SECRET_ITEM = re.compile(rf"((['\"])\w*(?:{_WORDS})\w*\2\s*:\s*)(['\"])[^'\"]*\3", re.IGNORECASE)


def scrub(text: str) -> str:
    """Free text (an exception message, a traceback, an echoed override) with URI passwords,
    http users and credential-like `name=value` values replaced by ***."""
    text = _EMBEDDED_PASSWORD.sub(rf"\1{MASK}@", hide_secret_values(text))
    text = _EMBEDDED_HTTP_USER.sub(rf"\1{MASK}@", text)
    text = _SECRET_ITEM.sub(rf"\1\3{MASK}\3", text)
    return _SECRET_ASSIGNMENT.sub(rf"\1{MASK}", text)


def scrub_override(override: str) -> str:
    """A Hydra override as it may be echoed: scrubbed, and with its value masked whole when it
    sets runtime environment variables (`+cluster.runtime_env.env_vars.X=…`, or a mapping that
    holds `env_vars`), whose values are all treated as secret."""
    key, sep, value = override.partition("=")
    if sep and (ENV_VARS_KEY in key or ENV_VARS_KEY in value):
        return f"{key}={MASK}"
    return scrub(override)


def redact_tree(node: Any) -> Any:
    """A config (dicts, lists, strings) fit for MLflow params, `sweep.json` and logs: every value
    under an `env_vars` key masked, every credential-named value masked, every URI redacted and
    every embedded password masked."""
    if isinstance(node, dict):
        shown: dict[Any, Any] = {}
        for key, value in node.items():
            if str(key) == ENV_VARS_KEY and isinstance(value, dict):
                shown[key] = {name: MASK for name in value}
            elif looks_secret(str(key)) and isinstance(value, str) and value:
                shown[key] = MASK
            else:
                shown[key] = redact_tree(value)
        return shown
    if isinstance(node, (list, tuple)):
        return [redact_tree(item) for item in node]
    if isinstance(node, str):
        return redact(_EMBEDDED_PASSWORD.sub(rf"\1{MASK}@", hide_secret_values(node)))
    return node


def uri_credentials(uri: str) -> list[str]:
    """What in `uri` is a credential: a password, an http(s) user (often a token), a query key."""
    parts = urlsplit(uri)
    found = []
    try:
        password, user = parts.password, parts.username
    except ValueError:  # an unparsable netloc (a bad port): no userinfo to speak of
        password = user = None
    if password is not None:
        found.append("a password")
    elif user is not None and parts.scheme in ("http", "https"):
        found.append("a user name (often a token)")
    found += [f"query parameter {key!r}" for key, _ in parse_qsl(parts.query, True) if looks_secret(key)]
    return found


def value_credentials(value: str) -> list[str]:
    """What in a free-form value (an environment variable's) is a credential: a URI with a
    password or secret query anywhere in it."""
    found = []
    for token in re.findall(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+", value):
        found += uri_credentials(token)
    return found


#: Where MLflow reads credentials from, so that no URI has to carry them.
MLFLOW_GUIDANCE = ("put them in MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (or "
                   "MLFLOW_TRACKING_TOKEN; a database: its own password file, e.g. ~/.pgpass), "
                   "which MLflow reads itself")


def tracking_uri_problem(uri: str, source: str) -> str | None:
    """Why the tracking URI `uri` (from `source`: "tracking.uri", "MLFLOW_TRACKING_URI", …) is
    refused, or None: a URI with credentials would be printed by MLflow itself (its "View run
    at" lines), kept in exception text and warnings, and stored with the sweep."""
    secrets = uri_credentials(uri)
    if not secrets:
        return None
    return (f"{source}={redact(uri)!r}: holds credentials ({', '.join(secrets)}), which would land "
            f"in logs and the sweep's output; {MLFLOW_GUIDANCE}")
