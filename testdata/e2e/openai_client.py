"""Drive Loadout with the official OpenAI Python client (cmd/loadout/e2e_test.go).

Usage: python3 openai_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)
Exits non-zero with a message on the first check that fails; prints "ok".
"""
import sys
import time

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0, timeout=60)

ids = sorted(m.id for m in client.models.list().data)
assert {"a", "b", "keep"} <= set(ids), ids

reply = client.chat.completions.create(
    model="a", max_tokens=8, messages=[{"role": "user", "content": "hello"}])
assert reply.choices[0].message.content, reply

chunks, arrivals = [], []
for chunk in client.chat.completions.create(
        model="a", max_tokens=12, stream=True,
        messages=[{"role": "user", "content": "stream please"}]):
    if chunk.choices and chunk.choices[0].delta.content:
        chunks.append(chunk.choices[0].delta.content)
        arrivals.append(time.monotonic())
assert len(chunks) >= 10, chunks
assert arrivals[-1] - arrivals[0] > 0.1, "the stream arrived all at once"

emb = client.embeddings.create(model="keep", input=["one", "two"])
assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0, emb
# The client asks for base64 unless told otherwise and decodes it; the
# floats asked for as floats are the same vector.
flt = client.embeddings.create(model="keep", input=["one"], encoding_format="float")
assert len(flt.data[0].embedding) == len(emb.data[0].embedding), (emb, flt)
assert all(abs(a - b) < 1e-6 for a, b in zip(emb.data[0].embedding, flt.data[0].embedding)), (emb, flt)

model = client.models.retrieve("keep")
assert model.id == "keep" and model.object == "model", model

comp = client.completions.create(model="b", prompt="once upon", max_tokens=4)
assert comp.choices[0].text, comp

print("ok")
