"""A read-only file server for ``reports/`` and ``dist/`` on 127.0.0.1, so the Prefect artifacts' links open
(a web page cannot open ``file://``); ``make ui`` passes its address as ``LMPIPE_REPORTS_URL``.

    python -m flows.files [--root .] [--port 4201]
"""

from __future__ import annotations

import argparse
import functools
import io
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVED = ("reports", "dist")  # top-level folders a request may reach; anything else is 404


class ReportsHandler(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` limited to ``SERVED`` (paths resolved), GET/HEAD only; Markdown, JSON and
    TSV served as UTF-8 text."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".md": "text/plain; charset=utf-8",
                      ".json": "application/json; charset=utf-8", ".tsv": "text/plain; charset=utf-8",
                      ".svg": "image/svg+xml"}

    def send_head(self):
        full = Path(self.translate_path(self.path)).resolve()
        root = Path(self.directory).resolve()
        if full != root and not any(full == root / n or full.is_relative_to(root / n) for n in SERVED):
            self.send_error(404, "not served")
            return None
        return super().send_head()

    def list_directory(self, path):
        if Path(path).resolve() == Path(self.directory).resolve():  # the root lists only what it serves
            self.send_response(200)
            body = "".join(f'<li><a href="{n}/">{n}/</a></li>' for n in SERVED if (Path(path) / n).is_dir())
            data = f"<html><body><ul>{body}</ul></body></html>".encode()
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return io.BytesIO(data)
        return super().list_directory(path)

    def log_message(self, format, *args) -> None:  # quiet: the UI's own log is the one to read
        pass


def make_server(root: Path, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), functools.partial(ReportsHandler, directory=str(root.resolve())))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.files", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--port", type=int, default=4201)
    args = ap.parse_args(argv)
    server = make_server(args.root, args.port)
    print(f"reports: http://127.0.0.1:{args.port}/reports/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
