"""Drive Loadout in front of real llama.cpp servers with the official OpenAI client.

Usage: python3 openai_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)

Used by cmd/loadout/llamacpp_e2e_test.go with the models of
testdata/llamacpp/loadout.yaml (tiny, small, large: random weights, so the
text is gibberish). Exits non-zero with a message on the first check that
fails; prints one JSON line of measurements and then "ok".
"""
import json
import statistics
import sys
import time

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0, timeout=120)

# /v1/models lists the configured models.
ids = sorted(m.id for m in client.models.list().data)
assert {"tiny", "small", "large"} <= set(ids), ids

# A chat completion: a cold load of tiny, then real tokens.
reply = client.chat.completions.create(
    model="tiny", max_tokens=16, seed=1, messages=[{"role": "user", "content": "hello"}])
assert reply.choices[0].message.content, reply
assert reply.usage.completion_tokens > 0, reply.usage

# A streaming chat completion from the large model: the tokens must arrive
# one by one as llama.cpp samples them, not all at once at the end.
start = time.monotonic()
chunks, arrivals = [], []
for chunk in client.chat.completions.create(
        model="large", max_tokens=64, stream=True, seed=2,
        messages=[{"role": "user", "content": "tell me a story"}]):
    if chunk.choices and chunk.choices[0].delta.content:
        chunks.append(chunk.choices[0].delta.content)
        arrivals.append(time.monotonic())
assert len(chunks) >= 32, f"{len(chunks)} content chunks: {chunks}"
gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
spread = arrivals[-1] - arrivals[0]
# A buffered stream delivers every chunk at once, when generation ends. A
# busy machine may hand the client a few chunks per read, so count bursts
# (chunks more than a millisecond apart) rather than single gaps.
# (Not the total spread: a tiny model on a fast CPU samples 64 tokens in
# a few milliseconds, and a descheduled client then reads them together.)
bursts = 1 + sum(g > 0.001 for g in gaps)
assert bursts >= 8, f"{len(chunks)} chunks arrived in {bursts} bursts over {spread * 1000:.2f} ms: the stream was buffered"

# A completion from the third model (another swap).
comp = client.completions.create(model="small", prompt="once upon a time", max_tokens=8, seed=3)
assert comp.choices[0].text, comp

print(json.dumps({
    "stream_chunks": len(chunks),
    "stream_ttft_ms": round((arrivals[0] - start) * 1000, 1),
    "stream_spread_ms": round(spread * 1000, 1),
    "median_gap_ms": round(statistics.median(gaps) * 1000, 2),
    "bursts": bursts,
}))
print("ok")
