"""The check-set scripts' JSON reader (validate-published, validate-stacks, validate-3d): what
the project's own reader refuses (core/json_reader.hpp) is refused here too, so a check file
cannot say one thing to the C++ tools and another to the script that scores them. Python's
json module alone keeps the last of a key given twice, reads NaN and Infinity as numbers, and
takes true for the integer 1."""
import json
import math


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError("key %s given twice in one object (expected each key once)" %
                             json.dumps(key))
        seen[key] = value
    return seen


def _no_constant(name):
    raise ValueError("%s is not JSON (expected a finite number)" % name)


def load(path):
    """The JSON document in `path`; ValueError for malformed JSON, a key given twice in one
    object, NaN or Infinity; OSError when it cannot be read."""
    with open(path) as f:
        return json.load(f, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def is_int(value):
    """An integer written as one (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    """A finite number (true and false are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
