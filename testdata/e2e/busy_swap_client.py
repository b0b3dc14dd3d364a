"""busy_swap_client.py: how long a request for one model waits while
clients keep another model of its swap group busy (fifo's drain_after,
docs/BENCHMARKS.md, "A busy model drains for the request that waits to
evict it").

    python busy_swap_client.py BASE_URL BUSY OTHER SECONDS CLIENTS

CLIENTS threads of the OpenAI SDK send chat requests to BUSY back to back
(60 output tokens each) for SECONDS; one second in, one request goes to
OTHER, and the script prints how long it took. On the embedded default
configuration (small and medium share a swap group):

    ./bin/loadout serve --listen 127.0.0.1:8080 &
    python busy_swap_client.py http://127.0.0.1:8080/v1 small medium 20 8
"""

import sys
import threading
import time

from openai import OpenAI


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    base, busy, other = sys.argv[1], sys.argv[2], sys.argv[3]
    seconds, clients = float(sys.argv[4]), int(sys.argv[5])
    client = OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)
    stop = time.time() + seconds

    def user() -> None:
        while time.time() < stop:
            client.chat.completions.create(
                model=busy, messages=[{"role": "user", "content": "hi"}], max_tokens=60)

    threads = [threading.Thread(target=user) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1)
    start = time.time()
    client.chat.completions.create(
        model=other, messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    print(f"{clients} clients on {busy}: {other} served after {time.time() - start:.2f} s")
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
