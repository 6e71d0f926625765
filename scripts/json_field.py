#!/usr/bin/env python3
"""Reads fields of a run's JSON files for the shell scripts (run.sh, sweep.sh), with Python's
json module instead of sed patterns that depend on key order and spacing.

  json_field.py FILE KEY             a field of a JSON object file (summary.json)
  json_field.py --last-epoch FILE KEY  a field of rank 0's last epoch line in metrics.jsonl
  json_field.py --rows FILE KEY...   rank 0's metrics.jsonl lines holding every KEY: the
                                     KEYs' values, one line each, space-separated (gnuplot)

Prints the value (true/false for booleans), or nothing when the file or key is missing; exit 1
with the reason on a file that is not JSON."""
import json
import sys


def show(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def lines(path):
    """The JSON objects of a .jsonl file; exit 1 naming the line that is not JSON."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"json_field.py: {path}:{n}: not JSON: {e}")


def main(argv):
    if len(argv) >= 4 and argv[1] == "--rows":
        keys = argv[3:]
        for o in lines(argv[2]):
            if o.get("rank") == 0 and all(o.get(k) is not None for k in keys):
                print(" ".join(show(o[k]) for k in keys))
        return
    if len(argv) == 4 and argv[1] == "--last-epoch":
        path, key, obj = argv[2], argv[3], None
        try:
            for o in lines(path):
                if o.get("rank") == 0 and "epoch" in o and "train_acc" in o:
                    obj = o
        except FileNotFoundError:
            return
        if obj is not None:
            print(show(obj.get(key)))
        return
    if len(argv) != 3:
        sys.exit(__doc__)
    try:
        with open(argv[1]) as f:
            obj = json.load(f)
    except FileNotFoundError:
        return
    except json.JSONDecodeError as e:
        sys.exit(f"json_field.py: {argv[1]}: not JSON: {e}")
    print(show(obj.get(argv[2])))


if __name__ == "__main__":
    main(sys.argv)
