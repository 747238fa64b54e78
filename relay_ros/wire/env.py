"""Where the client finds its server: ``WALLE_URL`` and ``WALLE_DIRECT``.

relay reads its variables from the environment, or else from a ``.env`` file in
the working directory or the nearest parent that has one; variables already set
in the environment win. This module does that with python-dotenv, *reading* the
file (``dotenv_values``) so that ``os.environ`` is never modified: a ``.env`` must
not leak into child processes or into other libraries of the robot's process.

``WALLE_URL`` holds a ``{model}`` placeholder, e.g.
``wss://acme--walle-{model}.modal.run`` or ``ws://127.0.0.1:8000/{model}``;
:func:`resolve_url` fills it with one of the model IDs of :mod:`relay_ros.models`.

A URL may carry secrets (``wss://user:token@host/...``, ``?token=...``). The
client needs them to connect, but nothing else may show them: every log line,
exception text and diagnostic that names a URL goes through :func:`redact_url`
(or :func:`redact_text` for text that may contain URLs).

Every URL a program is given (``WALLE_URL`` from the environment or ``.env``, the
node's ``policy_url``, ``relay-ros replay --url``, ``PolicyClient(url=...)``) passes
:func:`parse_server_url` before anything uses it: a URL that is not ``ws://`` or
``wss://`` with a host raises websockets' ``InvalidURI`` naming the redacted URL
and what to write instead (``https://`` -> ``wss://``, as a browser copy gives).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dotenv import dotenv_values, find_dotenv
from websockets.exceptions import InvalidURI
from websockets.uri import WebSocketURI, parse_uri

from relay_ros.models import get_model

__all__ = [
    "EnvSettingError",
    "direct_enabled",
    "find_env_file",
    "get_setting",
    "parse_server_url",
    "redact_text",
    "redact_url",
    "resolve_url",
]


class EnvSettingError(ValueError):
    """An environment setting has a value this module cannot use."""


def find_env_file(cwd: Path | None = None) -> Path | None:
    """Return the ``.env`` in ``cwd`` or its nearest parent that has one, else None.

    ``cwd=None`` means the process's working directory (python-dotenv's
    ``find_dotenv(usecwd=True)``); an explicit ``cwd`` runs the same upward search
    from there, which keeps callers and tests independent of ``os.chdir``.
    """
    if cwd is None:
        found = find_dotenv(usecwd=True)
        return Path(found) if found else None
    start = Path(cwd).resolve()
    for directory in (start, *start.parents):
        candidate = directory / ".env"
        if candidate.is_file():
            return candidate
    return None


def get_setting(
    name: str, *, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str | None:
    """Return variable ``name`` from the environment, else from the nearest ``.env``.

    The environment wins over the file. An empty value counts as unset (so
    ``WALLE_URL= cmd`` falls back to the file), as does a bare ``NAME`` line
    without ``=`` in the file. ``os.environ`` is never modified.

    Args:
        name: Variable name, e.g. ``"WALLE_URL"``.
        environ: Mapping to read instead of ``os.environ``.
        cwd: Directory to start the ``.env`` search from instead of the working
            directory.
    """
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value:
        return value
    path = find_env_file(cwd)
    if path is None:
        return None
    file_value = dotenv_values(path).get(name)
    return file_value or None


def resolve_url(
    model: str, *, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str:
    """Return ``WALLE_URL`` with ``{model}`` replaced by ``model``.

    Args:
        model: ``"pi05"``, ``"pi0"`` or ``"groot"``.
        environ: Mapping to read instead of ``os.environ``.
        cwd: Directory to start the ``.env`` search from instead of the working
            directory.

    Raises:
        relay_ros.models.UnknownModelError: ``model`` is not a registered model ID.
        KeyError: ``KeyError('WALLE_URL')`` when neither the environment nor a
            ``.env`` file sets it.
    """
    get_model(model)
    template = get_setting("WALLE_URL", environ=environ, cwd=cwd)
    if template is None:
        raise KeyError("WALLE_URL")
    return template.replace("{model}", model)


def direct_enabled(environ: Mapping[str, str] | None = None, *, cwd: Path | None = None) -> bool:
    """Whether the client may follow a server's ``direct_url`` (``WALLE_DIRECT``).

    True when ``WALLE_DIRECT`` is unset or ``"1"``, False when it is ``"0"``; read
    like ``WALLE_URL`` (environment first, then the nearest ``.env``).

    Raises:
        EnvSettingError: ``WALLE_DIRECT`` has any other value.
    """
    value = get_setting("WALLE_DIRECT", environ=environ, cwd=cwd)
    if value is None or value.strip() == "1":
        return True
    if value.strip() == "0":
        return False
    raise EnvSettingError(f"WALLE_DIRECT={value!r} is not one of ['0', '1']")


#: What replaces a secret in a redacted URL.
REDACTED = "***"
# A URL inside free text: a scheme, "://", then everything up to white space or a
# quote (exception texts quote URLs with ' or ").
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``url`` with its secrets replaced by ``***``: the user info (``user:password@``
    becomes ``***@``) and every query value (``?token=abc&x=1`` becomes
    ``?token=***&x=***``); a fragment is dropped. Scheme, host, port and path stay,
    so the result still tells which server is meant.

    Text that does not parse as a URL is returned with everything after the
    scheme's ``//`` up to the first ``/`` replaced, which errs on the side of hiding.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        head, sep, rest = url.partition("://")
        if not sep:
            return url
        _, slash, path = rest.partition("/")
        return f"{head}://{REDACTED}{slash}{path.split('?')[0]}"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@" + (f"[{host}]" if ":" in host else host)
        if port is not None:
            netloc += f":{port}"
    query = parts.query
    if query:
        query = "&".join(
            f"{field.partition('=')[0]}={REDACTED}" if "=" in field else REDACTED
            for field in query.split("&")
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (for exception
    texts of other libraries that quote the URL, e.g. ``InvalidURI``)."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


# Schemes people paste for a WebSocket server, and the WebSocket scheme meant.
_WEBSOCKET_SCHEME_FOR = {"https": "wss", "http": "ws"}


def parse_server_url(url: str) -> WebSocketURI:
    """``url`` parsed as a policy server's WebSocket URL (websockets' ``parse_uri``).

    The one check of every server URL: a URL a user gives is checked before a
    connection is tried, and no error shows its secrets.

    Raises:
        websockets.exceptions.InvalidURI: ``url`` is not a ``ws://`` or ``wss://`` URL
            with a host (or its port, user info or host name do not parse). The
            exception's ``uri`` is the redacted URL (:func:`redact_url`) and its
            message says what was expected; an ``https://`` (``http://``) URL is told
            to use ``wss://`` (``ws://``): the same server, spoken to over WebSocket.
    """
    shown = redact_url(url)
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        scheme = ""
    meant = _WEBSOCKET_SCHEME_FOR.get(scheme)
    if meant is not None:
        raise InvalidURI(
            shown,
            f"scheme isn't ws or wss; a policy server speaks WebSocket: write {meant}:// "
            f"instead of {scheme}:// (e.g. {meant}://host/pi05)",
        ) from None
    try:
        return parse_uri(url)
    except InvalidURI as exc:
        what = exc.msg
        if what.startswith("scheme"):
            given = f"{scheme}://" if scheme else "(none)"
            what = (
                f"scheme {given} isn't ws or wss; expected ws://host:port/path or wss://host/path"
            )
        raise InvalidURI(shown, what) from None
    except ValueError as exc:  # urllib's text may quote parts of the URL: not shown
        text = str(exc).lower()
        if "port" in text:
            what = "the port is not a number from 0 to 65535"
        elif "ipv6" in text:
            what = "the host is not a valid IPv6 address in brackets"
        else:
            what = "the host name or the user info cannot be decoded"
        raise InvalidURI(shown, what) from None
