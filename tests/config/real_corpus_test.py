"""Real DeepSpeed configs (tests/config/corpus/real, sources in SOURCES.md) through Python DeepSpeed and through us.

For each config, Python DeepSpeed 0.19.8's DeepSpeedConfig gives the verdict (deepspeed_verdict.py: "auto" filled as
Hugging Face's Trainer fills it with its default arguments, hidden size 4096, 1000 steps) and ds_check_config gives
ours with what a program would tell initialize (--hidden_size 4096 --total_num_steps 1000; the rest of "auto" from
the Trainer's defaults, ours). The test fails where
  - the verdicts differ (accept / refuse) and expected_differences.json does not list the config, or lists it with
    another verdict or a message ours does not contain (a stale entry fails too);
  - ours refuses without naming a key (the message must start with the file and a JSON path);
  - both fill an "auto" and the values differ;
  - both accept and what DeepSpeed made of a key a run acts on (batch, clipping, precision, stage, offload devices,
    stage-3 bounds, reduce bucket, optimizer type and hyperparameters, scheduler type) differs from our resolved
    config (ds_check_config's stdout);
  - both accept and DeepSpeed refuses our resolved config: what this build writes (a dump, a checkpoint's config)
    must be a config DeepSpeed reads (keys DeepSpeed 0.19.8 removed or never had are left out of it).
Warnings (keys DeepSpeed ignores) count as accepting; each must name the key.

  python real_corpus_test.py DS_CHECK_CONFIG
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus" / "real"


def ours(tool, path):
    run = subprocess.run([tool, str(path), "--hidden_size", "4096", "--total_num_steps", "1000"],
                         capture_output=True, text=True, timeout=60)
    resolved = json.loads(run.stdout) if run.returncode == 0 else {}
    filled, warnings, errors = {}, [], []
    for line in run.stderr.splitlines():
        if line.startswith('ds_check_config: "auto" '):
            path_value = line[len('ds_check_config: "auto" '):]
            key, _, rest = path_value.partition(" = ")
            filled[key] = rest.partition(" (")[0]
        elif line.startswith("ds_check_config: warning: "):
            warnings.append(line)
        elif line.strip():
            errors.append(line)
    return ("accept" if run.returncode == 0 else "refuse"), filled, warnings, errors, resolved


def dotted(tree, key):
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def same_value(theirs, mine):
    try:
        parsed = json.loads(mine)
    except json.JSONDecodeError:
        parsed = mine
    if isinstance(theirs, bool) or isinstance(parsed, bool):
        return theirs == parsed
    if isinstance(theirs, (int, float)) and isinstance(parsed, (int, float)):
        return abs(theirs - parsed) <= 1e-12 * max(1.0, abs(theirs))
    if isinstance(theirs, list) and isinstance(parsed, list):
        return len(theirs) == len(parsed) and all(same_value(a, json.dumps(b)) for a, b in zip(theirs, parsed))
    return theirs == parsed


def dumps_refused(dumps, env):
    """Our resolved configs through DeepSpeed's verdict: one failure line per config it refuses."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, resolved in dumps.items():
            paths.append(os.path.join(tmp, name))
            with open(paths[-1], "w") as f:
                json.dump(resolved, f)
        run = subprocess.run([sys.executable, str(HERE / "deepspeed_verdict.py")] + paths, capture_output=True,
                             text=True, timeout=900, env=env)
    if run.returncode != 0:
        return [f"deepspeed_verdict.py on our dumps exited {run.returncode}: {run.stderr[-500:]}"]
    verdicts = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    refused = [f"{d['file']}: DeepSpeed refuses our resolved config: {d['error'][:200]}" for d in verdicts
               if d["verdict"] != "accept"]
    return refused + ([] if len(verdicts) == len(dumps) else ["no verdict for some of our dumps"])


def main():
    tool = sys.argv[1]
    files = sorted(CORPUS.glob("*.json"))
    files = [f for f in files if f.name != "expected_differences.json"]
    expected = json.loads((CORPUS / "expected_differences.json").read_text())
    expected.pop("_about", None)
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    run = subprocess.run([sys.executable, str(HERE / "deepspeed_verdict.py")] + [str(f) for f in files],
                         capture_output=True, text=True, timeout=900, env=env)
    if run.returncode != 0:
        print(run.stderr[-3000:])
        print("FAIL: deepspeed_verdict.py exited", run.returncode)
        return 1
    theirs = {json.loads(line)["file"]: json.loads(line) for line in run.stdout.splitlines() if line.strip()}
    failures, agreed, listed = [], 0, 0
    dumps = {}  # file -> our resolved config, where both accept
    for f in files:
        d = theirs.get(f.name)
        if d is None:
            failures.append(f"{f.name}: no verdict from DeepSpeed")
            continue
        verdict, filled, warnings, errors, resolved = ours(tool, f)
        message = " ".join(errors)
        if verdict == "refuse" and f"{f.name}: " not in message:
            failures.append(f"{f.name}: refused without naming the file and the key: {message[:200]}")
        for w in warnings:
            if not re.match(r"ds_check_config: warning: .*\.json: [A-Za-z0-9_.\\]+: ", w):
                failures.append(f"{f.name}: a warning that names no file and key: {w}")
        exp = expected.get(f.name)
        if verdict != d["verdict"]:
            if exp is None:
                failures.append(f"{f.name}: DeepSpeed says {d['verdict']} ({d['error'][:150]}), we say {verdict}"
                                f" ({message[:200]})")
            elif exp["ours"] != verdict or exp["says"] not in message:
                failures.append(f"{f.name}: expected_differences.json says ours {exp['ours']} with "
                                f"'{exp['says']}', got {verdict}: {message[:200]}")
            else:
                listed += 1
        elif exp is not None:
            failures.append(f"{f.name}: listed in expected_differences.json but both say {verdict} (stale entry)")
        else:
            agreed += 1
        if verdict == "accept" and d["verdict"] == "accept":
            for key, value in d.get("filled", {}).items():
                if key in filled and not same_value(value, filled[key]):
                    failures.append(f"{f.name}: \"auto\" {key}: DeepSpeed/Trainer {value}, ours {filled[key]}")
            for key, value in d.get("resolved", {}).items():
                mine = dotted(resolved, key)
                if key.endswith(".type") and isinstance(mine, str):
                    mine = mine.lower()
                if not same_value(value, json.dumps(mine)):
                    failures.append(f"{f.name}: {key}: DeepSpeed acts on {value}, ours {mine}")
            dumps[f.name] = resolved
    failures += dumps_refused(dumps, env)
    accepted = sum(1 for d in theirs.values() if d["verdict"] == "accept")
    print(f"{len(files)} real configs: DeepSpeed accepts {accepted}; we agree on {agreed}, {listed} listed "
          f"differences; {len(dumps)} of our resolved configs went back through DeepSpeed")
    for line in failures:
        print("FAIL:", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
