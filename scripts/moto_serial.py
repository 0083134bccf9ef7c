"""moto's S3 server, answering one request at a time.

`moto_server` serves each request on a thread of its own, and its S3 backend
checks a conditional write's precondition (If-None-Match: *, If-Match) apart
from the write, under no lock: two creates racing for one key can both pass
the check and both succeed (seen on a loaded 2-core machine: 2 of 16 racers
applied). S3 itself never lets two. Served one request at a time, each
conditional write is atomic again, as tenure's compare-and-swap needs.

Werkzeug's single-threaded server speaks HTTP/1.0 and closes each
connection after its answer, so an idle keep-alive connection cannot hold
up the others.

Usage: moto_serial.py -H 127.0.0.1 -p PORT (the options moto_server takes).
"""

import argparse
import os

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    # moto builds some URLs from MOTO_PORT, as moto_server sets it.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, app, threaded=False)


if __name__ == "__main__":
    main()
