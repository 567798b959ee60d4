"""ds_serve against real clients: Python's openai package (completions and chat, streamed and not) and curl (/health,
/metrics, raw server-sent events), on loopback, with a tiny model whose expected text transformers wrote
(serve_reference.py). Then the bad-input list sent while other requests stream, a client that disconnects
mid-stream, a 100 MB body, and /metrics showing no request running and no KV block held at the end. Then a
second server with --max_queue 2: the requests past it get 429 while the admitted ones get their text.

With a launcher and a rank count, ds_serve runs tensor-parallel under the launcher (rank 0 serves HTTP, the other
ranks follow its plans) on the folder without a chat template: completions, the bad inputs under load, a
disconnect, chat refused by name, no leaks.

Usage: serve_openai_test.py DS_SERVE REFERENCE_DIR PORT [LAUNCHER TP_SIZE MASTER_PORT]
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai

DS_SERVE, REF, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
LAUNCHER, TP_SIZE, MASTER_PORT = (sys.argv[4], int(sys.argv[5]), sys.argv[6]) if len(sys.argv) > 6 else (None, 1, None)
MODEL = "tiny"
BASE = f"http://127.0.0.1:{PORT}"
EXPECTED = json.load(open(os.path.join(REF, "expected.json")))
# Small blocks and a small token budget per pass, so requests share the cache and long prompts are split (SplitFuse).
ENGINE_CONFIG = {"state_manager": {"max_tracked_sequences": 64, "max_ragged_batch_size": 48,
                                   "max_ragged_sequence_count": 16, "max_context": EXPECTED["context"],
                                   "memory_config": {"mode": "allocate", "size": 160}},
                 "kv_block_size": 16, "dtype": "fp32"}


def http(method, path, body=None, headers=None):
    """(status, text) of one request; body bytes or a str sent as is."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics():
    status, text = http("GET", "/metrics")
    assert status == 200, status
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
        assert m, f"not Prometheus text: {line!r}"
        values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values


def client():
    return openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=60)


def check_completion(case, text, finish, usage=None, what=""):
    assert text == case["text"], f"{what}: text {text!r} != transformers' {case['text']!r}"
    assert finish == case["finish_reason"], f"{what}: finish_reason {finish} != {case['finish_reason']}"
    if usage is not None:
        assert (usage.prompt_tokens, usage.completion_tokens) == (case["prompt_tokens"], case["completion_tokens"]), \
            f"{what}: usage {usage} != ({case['prompt_tokens']}, {case['completion_tokens']})"


def stream_completion(c, case, **kw):
    text, finish, usage = "", None, None
    for chunk in c.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=case["max_tokens"],
                                      temperature=0, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.text
            finish = choice.finish_reason or finish
    return text, finish, usage


def test_completions():
    c = client()
    # Under tensor parallelism every step crosses the ranks over Gloo: a few cases keep the test short.
    for case in EXPECTED["completions"][:3 if LAUNCHER else None]:
        r = c.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=case["max_tokens"], temperature=0)
        check_completion(case, r.choices[0].text, r.choices[0].finish_reason, r.usage, f"completion {case['prompt']!r}")
        assert r.object == "text_completion" and r.model == MODEL and r.id.startswith("cmpl-")
        text, finish, usage = stream_completion(c, case)
        check_completion(case, text, finish, usage, f"streamed completion {case['prompt']!r}")
    # The prompt as token ids gives the same text.
    case = EXPECTED["completions"][1]
    r = c.completions.create(model=MODEL, prompt=case["prompt_ids"], max_tokens=case["max_tokens"], temperature=0)
    check_completion(case, r.choices[0].text, r.choices[0].finish_reason, r.usage, "token-id prompt")


def test_chat():
    c = client()
    for case in EXPECTED["chat"]:
        r = c.chat.completions.create(model=MODEL, messages=case["messages"], max_tokens=case["max_tokens"],
                                      temperature=0)
        msg = r.choices[0].message
        assert msg.role == "assistant" and r.object == "chat.completion"
        check_completion(case, msg.content, r.choices[0].finish_reason, r.usage, "chat")
        text, finish, roles = "", None, []
        for chunk in c.chat.completions.create(model=MODEL, messages=case["messages"], temperature=0,
                                               max_completion_tokens=case["max_tokens"], stream=True):
            assert chunk.object == "chat.completion.chunk"
            for choice in chunk.choices:
                roles += [choice.delta.role] if choice.delta.role else []
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert roles == ["assistant"], roles
        check_completion(case, text, finish, None, "streamed chat")


def test_stop_strings_and_seed():
    c = client()
    for case in EXPECTED["stop"]:
        r = c.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=case["max_tokens"], temperature=0,
                                 stop=case["stop"])
        assert (r.choices[0].text, r.choices[0].finish_reason) == (case["text"], "stop"), r.choices[0]
        text, finish, _ = stream_completion(c, dict(case, finish_reason="stop"), stop=case["stop"])
        assert (text, finish) == (case["text"], "stop"), (text, finish)
    # Seeded sampling repeats; another seed (almost surely) differs.
    kw = dict(model=MODEL, prompt="Once", max_tokens=24, temperature=0.9, top_p=0.95)
    texts = [c.completions.create(seed=s, **kw).choices[0].text for s in (3, 3, 4)]
    assert texts[0] == texts[1], texts
    assert texts[0] != texts[2], texts


def test_curl():
    out = subprocess.run(["curl", "-s", "-w", " %{http_code}", BASE + "/health"], capture_output=True, text=True)
    assert out.stdout.endswith(" 200"), out.stdout
    out = subprocess.run(["curl", "-s", BASE + "/v1/models"], capture_output=True, text=True)
    assert json.loads(out.stdout)["data"][0]["id"] == MODEL, out.stdout
    out = subprocess.run(["curl", "-s", BASE + "/metrics"], capture_output=True, text=True)
    for name in ("ds_serve_queue_length", "ds_serve_running_requests", "ds_serve_kv_blocks_used",
                 "ds_serve_kv_blocks_total", "ds_serve_tokens_per_second", "ds_serve_requests_total"):
        assert f"\n# TYPE {name} " in "\n" + out.stdout, f"/metrics has no {name}"
    case = EXPECTED["completions"][0]
    body = json.dumps({"model": MODEL, "prompt": case["prompt"], "max_tokens": case["max_tokens"], "temperature": 0,
                       "stream": True})
    out = subprocess.run(["curl", "-s", "-N", "-H", "Content-Type: application/json", "-d", body,
                          BASE + "/v1/completions"], capture_output=True, text=True)
    events = out.stdout.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
    text = ""
    for event in events[:-2]:
        assert event.startswith("data: "), event
        text += json.loads(event[len("data: "):])["choices"][0]["text"]
    assert text == case["text"], (text, case["text"])


def bad_inputs():
    """(what, path, body, status, param): each must be refused with one line naming the field."""
    long_prompt = "word " * (EXPECTED["context"] + 10)
    ok = {"model": MODEL, "prompt": "Hi", "max_tokens": 4}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
    j = json.dumps
    return [
        ("malformed JSON", "/v1/completions", '{"model": "tiny", "prompt": "Hi"', 400, None),
        ("not an object", "/v1/completions", "[1, 2]", 400, None),
        ("unknown field", "/v1/completions", j(dict(ok, frobnicate=1)), 400, "frobnicate"),
        ("prompt past the context", "/v1/completions", j(dict(ok, prompt=long_prompt)), 400, "prompt"),
        ("chat past the context", "/v1/chat/completions",
         j(dict(chat, messages=[{"role": "user", "content": long_prompt}])), 400, "messages"),
        ("max_tokens 0", "/v1/completions", j(dict(ok, max_tokens=0)), 400, "max_tokens"),
        ("max_tokens huge", "/v1/completions", j(dict(ok, max_tokens=10**9)), 400, "max_tokens"),
        ("max_tokens past int64", "/v1/completions", j(dict(ok, max_tokens=2**70)), 400, "max_tokens"),
        ("max_tokens a string", "/v1/completions", j(dict(ok, max_tokens="5")), 400, "max_tokens"),
        ("temperature a string", "/v1/completions", j(dict(ok, temperature="hot")), 400, "temperature"),
        ("top_p 0", "/v1/completions", j(dict(ok, top_p=0)), 400, "top_p"),
        ("prompt a number", "/v1/completions", j(dict(ok, prompt=5)), 400, "prompt"),
        ("token id past the vocabulary", "/v1/completions", j(dict(ok, prompt=[1, 10**6])), 400, "prompt"),
        ("several prompts", "/v1/completions", j(dict(ok, prompt=["a", "b"])), 400, "prompt"),
        ("n 2", "/v1/completions", j(dict(ok, n=2)), 400, "n"),
        ("logprobs", "/v1/completions", j(dict(ok, logprobs=3)), 400, "logprobs"),
        ("five stop strings", "/v1/completions", j(dict(ok, stop=["a", "b", "c", "d", "e"])), 400, "stop"),
        ("no prompt", "/v1/completions", j({"model": MODEL}), 400, "prompt"),
        ("unknown model", "/v1/completions", j(dict(ok, model="gpt-9")), 404, "model"),
        ("chat without messages", "/v1/chat/completions", j({"model": MODEL}), 400, "messages"),
        ("chat bad role", "/v1/chat/completions", j(dict(chat, messages=[{"role": "wizard", "content": "x"}])), 400,
         "messages[0].role"),
        ("chat image content", "/v1/chat/completions",
         j(dict(chat, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])),
         400, "messages[0].content[0]"),
        ("chat tools", "/v1/chat/completions", j(dict(chat, tools=[{"type": "function"}])), 400, "tools"),
        ("unknown path", "/v1/embeddings", j(ok), 404, None),
    ]


def check_refusal(what, status, text, want_status, want_param):
    assert status == want_status, f"{what}: status {status}, expected {want_status}: {text}"
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}, f"{what}: {err}"
    assert err["message"] and "\n" not in err["message"], f"{what}: not one line: {err['message']!r}"
    assert err["param"] == want_param, f"{what}: param {err['param']!r}, expected {want_param!r}"
    assert err["type"] == "invalid_request_error", f"{what}: type {err['type']}"


def test_bad_inputs_under_load():
    """Long streams run while every bad input is sent; each bad input gets its 4xx, the streams their text."""
    c = client()
    long_cases = [case for case in EXPECTED["completions"] if case["max_tokens"] == 200]
    results, started = {}, threading.Barrier(len(long_cases) + 1, timeout=60)

    def run_stream(case):
        text, finish = "", None
        try:
            stream = c.completions.create(model=MODEL, prompt=case["prompt"], max_tokens=case["max_tokens"],
                                          temperature=0, stream=True)
            for i, chunk in enumerate(stream):
                if i == 0:
                    started.wait()  # every stream has begun before the bad inputs go out
                text += chunk.choices[0].text
                finish = chunk.choices[0].finish_reason or finish
            results[case["prompt"]] = (text, finish)
        except Exception as e:  # reported below
            results[case["prompt"]] = e

    threads = [threading.Thread(target=run_stream, args=(case,)) for case in long_cases]
    for t in threads:
        t.start()
    started.wait()
    running = metrics()["ds_serve_running_requests"] + metrics()["ds_serve_queue_length"]
    for what, path, body, status, param in bad_inputs():
        check_refusal(what, *http("POST", path, body), status, param)
    for t in threads:
        t.join()
    for case in long_cases:
        got = results[case["prompt"]]
        assert not isinstance(got, Exception), f"stream {case['prompt']!r} failed: {got!r}"
        check_completion(case, got[0], got[1], None, f"stream beside bad inputs {case['prompt']!r}")
    print(f"  {len(bad_inputs())} bad inputs refused while {running:.0f} requests were running or queued")


def test_huge_body():
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(b'{"model": "tiny", "prompt": "' + b"x" * (100 << 20) + b'"}')
        f.flush()
        out = subprocess.run(["curl", "-s", "-H", "Content-Type: application/json", "--data-binary", "@" + f.name,
                              "-w", "\n%{http_code}", BASE + "/v1/completions"], capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    check_refusal("100 MB body", int(code), body, 413, None)
    # A chunked body has no size up front: refused before it is read.
    out = subprocess.run(["curl", "-s", "-H", "Content-Type: application/json", "-H", "Transfer-Encoding: chunked",
                          "-d", json.dumps({"model": MODEL, "prompt": "Hi"}), "-w", "\n%{http_code}",
                          BASE + "/v1/completions"], capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    check_refusal("chunked body", int(code), body, 411, None)


def test_disconnect_mid_stream():
    before = metrics()
    c = client()
    stream = c.completions.create(model=MODEL, prompt="The license", max_tokens=EXPECTED["context"] - 8,
                                  temperature=0, stream=True)
    next(iter(stream))
    stream.close()  # the client goes away after its first chunk
    deadline = time.time() + 20
    while time.time() < deadline:
        m = metrics()
        if m["ds_serve_client_disconnects_total"] > before["ds_serve_client_disconnects_total"] and \
                m["ds_serve_running_requests"] == 0:
            break
        time.sleep(0.1)
    assert m["ds_serve_client_disconnects_total"] == before["ds_serve_client_disconnects_total"] + 1, m
    generated = m["ds_serve_generated_tokens_total"] - before["ds_serve_generated_tokens_total"]
    assert generated < EXPECTED["context"] - 8, f"the disconnected request ran to its end ({generated} tokens)"
    # The server still serves.
    test_completions_one()


def test_completions_one():
    case = EXPECTED["completions"][0]
    r = client().completions.create(model=MODEL, prompt=case["prompt"], max_tokens=case["max_tokens"], temperature=0)
    check_completion(case, r.choices[0].text, r.choices[0].finish_reason, r.usage, "after")


def test_no_chat_template():
    status, text = http("POST", "/v1/chat/completions",
                        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}))
    check_refusal("chat without a template", status, text, 400, "messages")
    assert "the model has no chat template" in json.loads(text)["error"]["message"], text


def test_no_leaks():
    m = metrics()
    for name in ("ds_serve_running_requests", "ds_serve_queue_length", "ds_serve_kv_blocks_used"):
        assert m[name] == 0, f"{name} is {m[name]} after every request ended"
    assert m["ds_serve_kv_blocks_total"] > 0, m
    assert m['ds_serve_requests_total{endpoint="completions",code="400"}'] >= 10, m
    assert m['ds_serve_requests_total{endpoint="completions",code="200"}'] >= 3, m


def test_queue_full():
    """With --max_queue 2 (the second server): 12 requests at once, each 200 tokens long (hundreds of forward passes,
    far longer than their arrival takes): the ones past the queue get 429 with one line, the admitted ones
    transformers' text, and afterwards nothing is held and the server takes requests again."""
    case = max(EXPECTED["completions"], key=lambda c: c["max_tokens"])
    body = json.dumps({"model": MODEL, "prompt": case["prompt"], "max_tokens": case["max_tokens"], "temperature": 0})
    go, answers = threading.Barrier(12, timeout=60), []

    def send():
        go.wait()
        answers.append(http("POST", "/v1/completions", body))

    threads = [threading.Thread(target=send) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy = [text for status, text in answers if status == 429]
    served = [text for status, text in answers if status == 200]
    assert len(busy) + len(served) == 12, [status for status, _ in answers]
    assert busy and len(served) >= 2, f"{len(served)} served, {len(busy)} refused with --max_queue 2"
    for text in busy:
        err = json.loads(text)["error"]
        assert "--max_queue" in err["message"] and "\n" not in err["message"], err
    for text in served:
        choice = json.loads(text)["choices"][0]
        check_completion(case, choice["text"], choice["finish_reason"], None, "admitted beside refused requests")
    test_completions_one()
    m = metrics()
    assert m['ds_serve_requests_total{endpoint="completions",code="429"}'] == len(busy), m
    assert m["ds_serve_running_requests"] == 0 and m["ds_serve_kv_blocks_used"] == 0, m


def start_server(config_path, log, extra=()):
    folder = os.path.join(REF, "model_nochat" if LAUNCHER else "model")
    command = [DS_SERVE, "--model_dir", folder, "--served_model_name", MODEL, "--port", str(PORT),
               "--config", config_path, "--max_body_bytes", str(1 << 20)] + list(extra)
    if LAUNCHER:
        command = [LAUNCHER, "--num_procs", str(TP_SIZE), "--master_port", MASTER_PORT] + command + \
                  ["--tp_size", str(TP_SIZE)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"FAIL: ds_serve exited with {proc.returncode} before serving:\n{log.read()}")
        try:
            if http("GET", "/health")[0] == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("FAIL: ds_serve did not answer /health within 120 s")


def run_server(config, tmp, tests, extra=()):
    """Starts ds_serve, runs `tests` against it, stops it with SIGTERM; the names of what failed."""
    log = open(os.path.join(tmp, "server.log"), "w+")
    proc = start_server(config, log, extra)
    failed = []
    try:
        for test in tests:
            t0 = time.time()
            try:
                test()
                print(f"ok   {test.__name__} ({time.time() - t0:.1f} s)")
            except AssertionError as e:
                failed.append(test.__name__)
                print(f"FAIL {test.__name__}: {e}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed after 30 s"
    log.seek(0)
    output = log.read()
    print("ds_serve's output:\n" + output.rstrip())
    # The launcher exits 128 + SIGTERM once it has forwarded the signal; the ranks must have ended by themselves.
    if code not in ((0, 143) if LAUNCHER else (0,)) or "SIGKILL" in output:
        failed.append(f"ds_serve's exit status {code} after SIGTERM")
        print(f"FAIL ds_serve exited with {code} after SIGTERM")
    return failed


def main():
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "serving.json")
        with open(config, "w") as f:
            json.dump(ENGINE_CONFIG, f)
        tests = [test_completions, test_chat, test_stop_strings_and_seed, test_curl, test_bad_inputs_under_load,
                 test_huge_body, test_disconnect_mid_stream, test_no_leaks]
        if LAUNCHER:
            tests = [test_completions, test_bad_inputs_under_load, test_disconnect_mid_stream,
                     test_no_chat_template, test_no_leaks]
        failed = run_server(config, tmp, tests)
        if not LAUNCHER:
            failed += run_server(config, tmp, [test_queue_full], ("--max_queue", "2"))
    if failed:
        raise SystemExit(f"FAIL: {', '.join(failed)}")
    print("serve_openai_test: all checks passed")


if __name__ == "__main__":
    main()
