"""`python -m gridwise status|services|call`: the CLI's words from Python, with its options
(before or after the command, from GRIDWISE_AGENT and GRIDWISE_TOKEN too) and its tables."""

import argparse
import json
import sys

from . import Client, GridRPCError


def _connection(parser: argparse.ArgumentParser, top: bool) -> None:
    # Given before the command they are the defaults; given after it, they win. Each
    # subcommand's copy must not reset what was given before it: SUPPRESS leaves it alone.
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--agent",
        default=default,
        help="the agent's host:port (several comma-separated; default: $GRIDWISE_AGENT)",
    )
    parser.add_argument(
        "--token", default=default, help="the grid's client token (default: $GRIDWISE_TOKEN)"
    )
    parser.add_argument("--config", default=default, help="a client configuration file (TOML)")


def _parse(x: str):
    for t in (int, float):
        try:
            return t(x)
        except ValueError:
            pass
    if x[:1] in "[{":
        try:
            return json.loads(x)
        except ValueError:
            pass
    return x


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gridwise")
    _connection(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="servers, their state, load and queues")
    st.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    sv = sub.add_parser("services", help="every service with its signature")
    sv.add_argument(
        "--describe",
        action="store_true",
        help="whole descriptions, and the routines servers describe but do not offer",
    )
    call = sub.add_parser("call", help="call a service with numbers, strings or JSON arrays")
    call.add_argument("service")
    call.add_argument("args", nargs="*")
    call.add_argument("--server", help="run it on this server (name or host:port)")
    for s in (st, sv, call):
        _connection(s, top=False)
    a = p.parse_args(argv)
    try:
        # Client() itself takes GRIDWISE_AGENT and GRIDWISE_TOKEN where nothing is given.
        c = Client(agent=a.agent, token=a.token, config=a.config)
        if a.command == "status":
            print(c._native.status_text(a.json), end="" if not a.json else "\n")
        elif a.command == "services":
            print(c._native.services_text(a.describe), end="")
        else:
            out = c.call(a.service, *[_parse(x) for x in a.args], server=a.server)
            print(out.tolist() if hasattr(out, "tolist") else out)
    except GridRPCError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
