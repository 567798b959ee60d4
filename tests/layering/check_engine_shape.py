"""Issue 53's limits on the engine's shape, checked over a checkout (or a fixture):

- the engine (src/runtime/engine*, but for engine_handle.cc, the public handle that answers the API's own questions
  such as Engine::zero_optimization_stage) names no ZeRO stage number, ZenFlow, SuperOffload, NVMe or a stage class:
  features arrive behind seams (zero::Stage, OptimizerStep, IterationSchedule, the layout's transforms), not as
  branches in the engine;
- engine*.cc together hold at most 1,200 lines;
- no function defined in src/ is over 80 lines;
- every process group is made through the rank grid of src/comm/mesh.h: no new_group call outside src/comm/;
- zero::Stage (src/zero/stage.h) has at most 16 virtual methods, none with a default that throws: what one stage
  does for one feature is an interface of its own (stage_features.h).

Prints "engine shape ok" or every violation with its file and line.
    python3 check_engine_shape.py ROOT [--max-engine-lines N] [--max-function-lines N] [--max-stage-virtuals N]
"""
import argparse
import pathlib
import re
import sys

FORBIDDEN = [
    # (Config key names such as stage3_gather_16bit_weights_on_model_save may appear in messages.)
    (re.compile(r"zero\.stage\b|stage\s*[<>=!]=?\s*[0-3]\b|\bstages?\s+[0-3]\b", re.I), "a ZeRO stage number"),
    (re.compile(r"zen_?flow", re.I), "ZenFlow"),
    (re.compile(r"super_?offload", re.I), "SuperOffload"),
    (re.compile(r"nvme", re.I), "NVMe"),
    (re.compile(r"\b(FlatStage|Stage3|Stage12)\b"), "a stage class"),
]
# Functions this check finds: a definition starts at column 0 (our style: no indentation inside namespaces), its
# signature may run over a few lines up to the "{" that ends one, and its body closes at the next "}" alone at
# column 0. Types, namespaces and one-line definitions are skipped.
HEAD = re.compile(r"^(?!namespace|struct|class|enum|union|extern|template|using|#|//|\s|})[A-Za-z_~].*")


# Functions over the limit from before it was set, by file and name (none left: the last two, the config's top-level
# and zero_optimization parsers, were split by subject). The check fails when a listed one is split (remove it
# here) and when any other function exceeds the limit.
LEGACY = set()


def function_name(head):
    m = re.search(r"([~\w]+)\s*\(", head)
    return m.group(1) if m else head


def engine_files(root, with_handle=False):
    return sorted(p for p in (root / "src/runtime").glob("engine*") if with_handle or p.name != "engine_handle.cc")


def function_lengths(path):
    lines = path.read_text(errors="replace").split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        head = i
        if HEAD.match(line):
            j = i
            while j < len(lines) and j < i + 8 and not lines[j].rstrip().endswith(("{", ";", "}")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{") and "(" in "".join(lines[i:j + 1]):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    if lines[k] and not lines[k][0].isspace() and lines[k] != "}":
                        break
                    k += 1
                if k < len(lines) and lines[k] == "}":
                    out.append((head + 1, k - head + 1, line.strip()[:70]))
                    i = k + 1
                    continue
        i += 1
    return out


# A virtual method's declaration (the destructor excepted), up to its ";" or its inline body.
VIRTUAL = re.compile(r"^\s*virtual\s+(?!~)[^;{]*?(\w+)\s*\([^;{]*(;|\{.*)")


def stage_seam_problems(root, max_virtuals):
    path = root / "src/zero/stage.h"
    if not path.is_file():
        return []
    problems, count = [], 0
    for n, line in enumerate(path.read_text(errors="replace").split("\n"), 1):
        m = VIRTUAL.match(line)
        if not m:
            continue
        count += 1
        if re.search(r"\bthrow\b|DS_CHECK\w*\(\s*false|DS_THROW", m.group(2)):
            problems.append(f"src/zero/stage.h:{n}: {m.group(1)} has a default that throws: make it a feature "
                            "interface (stage_features.h)")
    if count > max_virtuals:
        problems.append(f"src/zero/stage.h: zero::Stage has {count} virtual methods, over {max_virtuals}")
    return problems


def group_problems(root):
    problems = []
    for p in sorted((root / "src").rglob("*.cc")):
        if p.relative_to(root).parts[:2] == ("src", "comm"):
            continue
        for n, line in enumerate(p.read_text(errors="replace").split("\n"), 1):
            if re.search(r"\bnew_group\s*\(", line) and not line.lstrip().startswith("//"):
                problems.append(f"{p.relative_to(root)}:{n}: makes a process group outside comm/mesh.h: "
                                f"{line.strip()}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--max-engine-lines", type=int, default=1200)
    ap.add_argument("--max-function-lines", type=int, default=80)
    ap.add_argument("--max-stage-virtuals", type=int, default=16)
    ap.add_argument("--no-legacy-check", action="store_true", help="a fixture tree: LEGACY's files are not in it")
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    problems = []
    for p in engine_files(root):
        for n, line in enumerate(p.read_text(errors="replace").split("\n"), 1):
            for pattern, what in FORBIDDEN:
                if pattern.search(line):
                    problems.append(f"{p.relative_to(root)}:{n}: names {what}: {line.strip()}")
    total = sum(len(p.read_text(errors="replace").rstrip("\n").split("\n"))
                for p in engine_files(root, with_handle=True) if p.suffix == ".cc")
    if total > args.max_engine_lines:
        problems.append(f"src/runtime/engine*.cc: {total} lines together, over {args.max_engine_lines}")
    problems += stage_seam_problems(root, args.max_stage_virtuals)
    problems += group_problems(root)
    legacy_seen = set()
    for p in sorted((root / "src").rglob("*.cc")):
        for line, length, head in function_lengths(p):
            key = f"{p.relative_to(root)}:{function_name(head)}"
            if length <= args.max_function_lines:
                continue
            if key in LEGACY:
                legacy_seen.add(key)
                continue
            problems.append(f"{p.relative_to(root)}:{line}: a function of {length} lines, over "
                            f"{args.max_function_lines}: {head}")
    if (root / "src/runtime").is_dir() and not args.no_legacy_check:
        for key in sorted(LEGACY - legacy_seen):
            problems.append(f"{key}: no longer over {args.max_function_lines} lines (or gone): remove it from LEGACY")
    if problems:
        print("engine shape: " + str(len(problems)) + " problem(s)")
        print("\n".join(problems))
        return 1
    print(f"engine shape ok: engine*.cc {total} lines, no forbidden name, no function over {args.max_function_lines} "
          f"lines but the {len(legacy_seen)} listed to be split, zero::Stage within {args.max_stage_virtuals} "
          "virtual methods, every process group from comm/mesh.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
