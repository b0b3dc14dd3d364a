#!/usr/bin/env python3
"""A stand-in for llama.cpp's llama-server, on llama.cpp itself (llama-cpp-python).

llama-server cannot be installed on the test machines; llama.cpp can, through
llama-cpp-python. This script takes llama-server's flags (the ones the
llamaserver backend writes) and behaves as llama-server does where the
backend depends on it: it listens at once, answers GET /health with 503 while
the model loads and 200 once it has, exits non-zero with the loader's error
on stderr when the model does not load, and serves the OpenAI endpoints with
the real llama.cpp engine (llama_cpp.server's app).

Flags: --model FILE --host H --port N [--ctx-size N] [--n-gpu-layers N|auto|all]
[--parallel N] [--flash-attn on|off|auto] [--cache-type-k T] [--cache-type-v T]
[--threads N]; for tests only: --shim-load-delay SECONDS (wait before loading).
"""
import argparse
import asyncio
import json
import sys
import threading
import time

import uvicorn


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("-c", "--ctx-size", type=int, default=0)
    ap.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", default="auto")
    ap.add_argument("-np", "--parallel", type=int, default=1)
    ap.add_argument("-fa", "--flash-attn", default="auto")
    ap.add_argument("-ctk", "--cache-type-k", default="f16")
    ap.add_argument("-ctv", "--cache-type-v", default="f16")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-a", "--alias", default=None)
    ap.add_argument("--shim-load-delay", type=float, default=0.0)
    return ap.parse_args()


class Shim:
    """ASGI app: 503 until the llama.cpp app is loaded, then that app."""

    def __init__(self):
        self.app = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/health":
            ready = self.app is not None
            body = {"status": "ok"} if ready else {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            await respond(send, 200 if ready else 503, body)
            return
        if self.app is None:
            await respond(send, 503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
            return
        await self.app(scope, receive, send)


async def respond(send, status, body):
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]})
    await send({"type": "http.response.body", "body": raw})


def load(args, shim, server):
    try:
        if args.shim_load_delay > 0:
            time.sleep(args.shim_load_delay)
        from llama_cpp.server.app import create_app
        from llama_cpp.server.settings import ModelSettings, ServerSettings

        ngl = {"auto": -1, "all": -1}.get(args.n_gpu_layers)
        if ngl is None:
            ngl = int(args.n_gpu_layers)
        model = ModelSettings(
            model=args.model, model_alias=args.alias, n_ctx=args.ctx_size, n_gpu_layers=ngl, n_threads=args.threads,
            n_threads_batch=args.threads, flash_attn=args.flash_attn == "on", verbose=False)
        shim.app = create_app(server_settings=ServerSettings(host=args.host, port=args.port, interrupt_requests=False),
                              model_settings=[model])
    except BaseException as e:  # noqa: BLE001 - any load failure ends the server
        print(f"error: failed to load model '{args.model}': {e}", file=sys.stderr, flush=True)
        server.should_exit = True
        shim.failed = True


def main():
    args = parse()
    shim = Shim()
    shim.failed = False
    config = uvicorn.Config(shim, host=args.host, port=args.port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=load, args=(args, shim, server), daemon=True).start()
    asyncio.run(server.serve())
    return 1 if shim.failed else 0


if __name__ == "__main__":
    sys.exit(main())
