"""Credentials out of what is shown or recorded: the user-info of URLs (``scheme://user:secret@host``)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def redact_url(url: str) -> str:
    """``url`` without its user-info (``s3://user:secret@host/bucket`` -> ``s3://host/bucket``); a non-URL
    is returned as it is."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact_text(text: str) -> str:
    """Every URL's user-info in free text (an error message that quotes a registry) dropped."""
    return _USERINFO.sub(r"\1", text)
