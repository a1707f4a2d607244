"""Serve a model with ``max serve`` and talk to it with the OpenAI client.

    python examples/serve_openai.py PATH/TO/model.gguf-or-directory

Starts ``max serve`` on a free local port (``pip install ".[serve]"`` and ``pip install
openai`` first), waits for it to be ready, sends a chat request and a streamed completion, and
stops the server.
"""

import re
import subprocess
import sys

from openai import OpenAI


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd = [sys.executable, "-m", "max", "serve", "--model-path", sys.argv[1], "--served-model-name", "demo",
           "--host", "127.0.0.1", "--port", "0", "--devices", "cpu"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        # The server prints "Server ready on http://HOST:PORT" once the model is loaded.
        assert server.stdout is not None
        url = None
        for line in server.stdout:
            m = re.match(r"Server ready on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            sys.exit(f"max serve exited with {server.wait()}")
        client = OpenAI(base_url=url + "/v1", api_key="unused")
        print("models:", [m.id for m in client.models.list()])
        chat = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=16
        )
        print("chat:", chat.choices[0].message.content)
        print("streamed: ", end="")
        for chunk in client.completions.create(
            model="demo", prompt="The three primary colours are", max_tokens=16, stream=True
        ):
            print(chunk.choices[0].text, end="", flush=True)
        print()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
