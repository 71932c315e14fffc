"""Endpoints a submission may send the caller's bearer token to: TLS, or plain http to loopback.

Every request carries the caller's OAuth bearer token, so a plain ``http://`` endpoint (a local
stand-in) is taken only when it is written plainly and every URL parser reads the same loopback
host in it. One check serves submit, templates, compile --publish and verify.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

API_ENDPOINT = "api endpoint (--api-endpoint)"
REGISTRY_ENDPOINT = "registry endpoint (--registry-endpoint)"

# The one plain-http form allowed: no user info, backslash, space, control character,
# percent-escape, query or fragment can hide another host from one of the URL parsers.
_PLAIN_HTTP = re.compile(
    r"http://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>/[A-Za-z0-9._~/-]*)?"
)
_NOT_PLAIN = (
    ("@", "user info '@'"),
    ("\\", "a backslash"),
    ("%", "a percent-escape"),
    ("?", "a query '?'"),
    ("#", "a fragment '#'"),
)


def _loopback_host(host: str) -> bool:
    """Whether ``host`` (as written in the URL) is ``localhost`` or a loopback IP literal."""
    if host.lower() == "localhost":
        return True
    literal = host[1:-1] if host.startswith("[") else host
    try:  # Dotted decimal only: ipaddress refuses 0177.0.0.1, 127.1 and 2130706433.
        return ipaddress.ip_address(literal).is_loopback
    except ValueError:
        return False


def _plain_http_problem(endpoint: str) -> str | None:
    """What keeps ``endpoint`` from being plain http to loopback, in a few words, or None.

    The strict form must also agree with urllib3's parser, which is what requests uses to pick
    the host it connects to (it ends a host at a backslash, where ``urllib.parse`` does not).
    """
    from urllib3.util import parse_url

    try:
        parsed = parse_url(endpoint.lstrip())
    except ValueError:  # urllib3's LocationParseError.
        parsed = None
    sent_to = parsed.host if parsed else None
    where = f"requests would send it to {sent_to}" if sent_to else "no host requests can use"
    match = _PLAIN_HTTP.fullmatch(endpoint)
    if not match:
        odd = [why for char, why in _NOT_PLAIN if char in endpoint]
        if any(char.isspace() or not char.isprintable() for char in endpoint):
            odd.append("a space or control character")
        if not odd and sent_to and not _loopback_host(sent_to):
            return f"to {sent_to}"
        has = f"it has {' and '.join(odd)}; " if odd else ""
        return f"but not in the form http://HOST[:PORT][/PATH] ({has}{where})"
    host, port = match["host"], match["port"] and int(match["port"])
    if not _loopback_host(host):
        return f"to {host}"
    if port is not None and not 0 < port < 65536:
        return f"to port {port} (ports are 1-65535)"
    split = urllib.parse.urlsplit(endpoint)
    readings = {(sent_to, parsed and parsed.port), (split.hostname, split.port)}
    if any(
        (h or "").strip("[]").lower() != host.strip("[]").lower() or p != port for h, p in readings
    ):
        return f"to {host} by one URL parser but not by another ({where})"
    return None


def api_endpoint_problem(endpoint: str | None, what: str = API_ENDPOINT) -> str | None:
    """Why ``endpoint`` would send the credentials in the clear, or None.

    Every request carries the caller's OAuth bearer token in its ``Authorization`` header, so
    plain ``http://`` is allowed only to this machine's loopback (127.0.0.0/8, ::1,
    ``localhost``: a local stand-in), and only written plainly as ``http://HOST[:PORT][/PATH]``,
    since URL parsers disagree on anything trickier. No scheme or ``https://`` is TLS (the
    aiplatform REST transport adds ``https://`` to a bare host). Every command that takes an
    endpoint checks it here.
    """
    if not endpoint:
        return None
    # Anything a client could read as scheme http: spaces and control characters left out.
    squeezed = "".join(c for c in endpoint if c.isprintable() and not c.isspace())
    if not squeezed.lower().startswith("http:"):
        return None
    problem = _plain_http_problem(endpoint)
    if problem is None:
        return None
    return (
        f"{what} {endpoint!r} is plain http {problem}: every request carries your OAuth bearer "
        "token, which anyone on the way could read and reuse. Use https:// (or the host alone), "
        "or plain http only to a stand-in on this machine (127.0.0.1, ::1 or localhost), "
        "written as http://HOST[:PORT][/PATH]"
    )
