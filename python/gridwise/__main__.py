"""`python -m gridwise status|services|call`: a few of the CLI's words, from Python."""

import argparse
import json
import sys

from . import Client, GridRPCError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gridwise")
    p.add_argument("--agent", help="the agent's host:port")
    p.add_argument("--token", help="the grid's client token")
    p.add_argument("--config", help="a client configuration file (TOML)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="servers, their state and queues (JSON)")
    sub.add_parser("services", help="every service with its signature")
    call = sub.add_parser("call", help="call a service with int, float or string arguments")
    call.add_argument("service")
    call.add_argument("args", nargs="*")
    a = p.parse_args(argv)
    if not (a.agent or a.config):
        p.error("give --agent host:port or --config FILE")
    try:
        c = Client(agent=a.agent, token=a.token, config=a.config)
        if a.command == "status":
            print(json.dumps(c.status(), indent=2))
        elif a.command == "services":
            for s in c.services():
                print(s.signature)
        else:
            def parse(x: str):
                for t in (int, float):
                    try:
                        return t(x)
                    except ValueError:
                        pass
                return x

            print(c.call(a.service, *[parse(x) for x in a.args]))
    except GridRPCError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
