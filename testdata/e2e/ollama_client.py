"""Drive Loadout with the official Ollama Python client (cmd/loadout/e2e_test.go).

Usage: python3 ollama_client.py BASE_URL   (e.g. http://127.0.0.1:8080)
Exits non-zero with a message on the first check that fails; prints "ok".
"""
import sys
import time

from ollama import Client, ResponseError

client = Client(host=sys.argv[1], timeout=60)

names = sorted(m.model for m in client.list().models)
assert {"a", "b", "keep"} <= set(names), names

info = client.show("a")
assert "completion" in (info.capabilities or []), info

reply = client.chat(model="a", messages=[{"role": "user", "content": "hello"}],
                    options={"num_predict": 8}, stream=False)
assert reply.done and reply.message.role == "assistant" and reply.message.content, reply
assert reply.eval_count == 8 and reply.done_reason == "length", reply

# A bare name as Ollama's clients write it, tag included.
parts, arrivals, last = [], [], None
for part in client.chat(model="a:latest", messages=[{"role": "user", "content": "stream please"}],
                        options={"num_predict": 12}, stream=True):
    if part.message.content:
        parts.append(part.message.content)
        arrivals.append(time.monotonic())
    last = part
assert len(parts) == 12, parts
assert arrivals[-1] - arrivals[0] > 0.1, "the stream arrived all at once"
assert last.done and last.eval_count == 12 and last.total_duration > 0, last

gen = client.generate(model="b", prompt="once upon", options={"num_predict": 4})
assert gen.done and gen.response, gen

emb = client.embed(model="keep", input=["one", "two"])
assert len(emb.embeddings) == 2 and len(emb.embeddings[0]) > 0, emb
old = client.embeddings(model="keep", prompt="one")
assert list(old.embedding) == list(emb.embeddings[0]), "embeddings and embed disagree"

assert any(m.model == "keep" for m in client.ps().models), client.ps()
assert client.pull("keep").status == "success"

# Ollama's idiom: a generate with no prompt loads, keep_alive 0 unloads.
assert client.generate(model="b").done_reason == "load"
assert client.generate(model="b", keep_alive=0).done_reason == "unload"
assert not any(m.model == "b" for m in client.ps().models), client.ps()

# keep_alive is the model's TTL from the request on: -1 keeps "idle"
# (configured ttl 1) with no expiry; 300ms takes "a" (no ttl) off soon.
client.generate(model="idle", prompt="x", options={"num_predict": 2}, keep_alive=-1)
# Ollama's "forever" is about 292 years on; a time already past would
# read as "Stopping..." in `ollama ps`. The longest left is listed first.
listed = client.ps().models
running = {m.model: m for m in listed}
assert running["idle"].expires_at.year > time.gmtime().tm_year + 200, running["idle"]
assert all(a.expires_at >= b.expires_at for a, b in zip(listed, listed[1:])), listed
client.chat(model="a", messages=[{"role": "user", "content": "hi"}],
            options={"num_predict": 2}, keep_alive="300ms")
deadline = time.monotonic() + 10
while any(m.model == "a" for m in client.ps().models):
    assert time.monotonic() < deadline, "a stayed loaded past its keep_alive"
    time.sleep(0.05)

for call in (lambda: client.chat(model="nope", messages=[{"role": "user", "content": "hi"}]),
             lambda: client.pull("nope")):
    try:
        call()
    except ResponseError as e:
        assert e.status_code == 404 and "nope" in e.error, (e.status_code, e.error)
    else:
        raise AssertionError("an unknown model was served")

print("ok")
