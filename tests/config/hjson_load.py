#!/usr/bin/env python3
"""Reads config files the way DeepSpeed does (deepspeed/runtime/config.py: hjson.load with a hook
that raises on duplicate keys) and writes, for each FILE, OUT_DIR/<FILE's name>.out holding either
"ok" and the value as strict JSON on the next line, or "error" and the exception.

usage: hjson_load.py OUT_DIR FILE...
"""
import json
import os
import sys

import hjson


def raise_on_duplicate_keys(pairs):
    d = {}
    for key, value in pairs:
        if key in d:
            raise ValueError("Duplicate key in DeepSpeed config: {}".format(key))
        d[key] = value
    return d


def main():
    out_dir, files = sys.argv[1], sys.argv[2:]
    for path in files:
        try:
            with open(path, "r", encoding="utf-8") as f:
                value = hjson.load(f, object_pairs_hook=raise_on_duplicate_keys)
            text = "ok\n" + json.dumps(value) + "\n"
        except Exception as e:  # any failure is a rejection, as DeepSpeed would stop there
            text = "error\n{}: {}\n".format(type(e).__name__, e)
        with open(os.path.join(out_dir, os.path.basename(path) + ".out"), "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
