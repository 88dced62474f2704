"""Instructions per request of the access-log middleware alone (round 6), under callgrind:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg \
        python accesslog_micro.py 5000 off|/dev/null          # then: grep totals /tmp/cg*  / 5000

The middleware (proxy/accesslog.py) runs N times in process on asyncio's loop around a handler that notes
what the proxy's handlers note; instrumentation is on only for the N requests (callgrind_control). "off" is
`--access-log off`; a file is the CLI's BufferedLineHandler (batches every 0.1 s: at this speed, large).
"""

import asyncio
import os
import subprocess
import sys

from multidict import CIMultiDict

from adaptspec.cli._logging import configure_access_log
from adaptspec.proxy import accesslog


class Request:
    headers = CIMultiDict({"Content-Type": "application/json", "Authorization": "Bearer x"})
    method, path, app = "POST", "/v1/chat/completions", {}


class Response:
    status, prepared = 200, False

    def __init__(self) -> None:
        self.headers: dict = {}


async def handler(request: Request) -> Response:
    accesslog.note(model="fake", status=200, **{"class": "chat"}, proposer="none", gamma=0, worker="u0")
    accesslog.note(prompt_tokens=12.0, output_tokens=32.0, ttft_ms=0.35)
    return Response()


def callgrind(switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], stdout=subprocess.DEVNULL, check=False)


async def main(n: int, target: str) -> None:
    configure_access_log(target)
    middleware, request = accesslog._middleware(False), Request()
    for _ in range(50):
        await middleware(request, handler)
    await asyncio.sleep(0.2)
    callgrind("on")
    for _ in range(n):
        await middleware(request, handler)
    callgrind("off")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
    configure_access_log("off")
