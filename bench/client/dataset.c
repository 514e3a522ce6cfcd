/* dataset.c — JSONL and built-in prompt sets (see dataset.h). */
#include "dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "stats.h"

struct sd_dataset {
    sd_prompt *items;
    size_t n, cap;
};

/* Short Python code prompts: what a code-completion drafter sees most. */
static const char *const builtin_prompts[] = {
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import os\nimport sys\n\n\ndef main(argv: list[str]) -> int:\n",
    "class LRUCache:\n    def __init__(self, capacity: int):\n",
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n",
    "from dataclasses import dataclass\n\n\n@dataclass\nclass Point:\n",
    "def read_json(path: str) -> dict:\n    \"\"\"Load a JSON file and return its contents.\"\"\"\n",
    "import numpy as np\n\n\ndef softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:\n",
    "class Stack:\n    \"\"\"A simple LIFO stack.\"\"\"\n\n    def __init__(self):\n",
    "def is_prime(n: int) -> bool:\n",
    "import re\n\nEMAIL_RE = re.compile(\n",
    "def binary_search(arr: list[int], target: int) -> int:\n",
    "from typing import Iterable, Iterator\n\n\ndef chunked(it: Iterable, size: int) -> Iterator[list]:\n",
    "class Node:\n    def __init__(self, value, next=None):\n",
    "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n",
    "import argparse\n\n\ndef parse_args():\n    parser = argparse.ArgumentParser(",
    "def flatten(nested):\n    \"\"\"Flatten an arbitrarily nested list.\"\"\"\n",
    "import torch\nimport torch.nn as nn\n\n\nclass MLP(nn.Module):\n    def __init__(self, d_in, d_hidden, d_out):\n",
    "def word_count(text: str) -> dict[str, int]:\n",
    "async def fetch_all(session, urls):\n",
    "class BankAccount:\n    def __init__(self, owner: str, balance: float = 0.0):\n",
    "def levenshtein(a: str, b: str) -> int:\n",
    "import logging\n\nlogger = logging.getLogger(__name__)\n\n\ndef setup_logging(level=",
    "def matrix_multiply(a, b):\n",
    "from collections import defaultdict\n\n\ndef group_by(items, key):\n",
    "class Matrix:\n    def __init__(self, rows: int, cols: int):\n",
    "def parse_csv_line(line: str, sep: str = \",\") -> list[str]:\n",
    "import unittest\n\n\nclass TestStack(unittest.TestCase):\n    def setUp(self):\n",
    "def gcd(a: int, b: int) -> int:\n",
    "import sqlite3\n\n\ndef create_tables(conn: sqlite3.Connection) -> None:\n",
    "def topological_sort(graph: dict[str, list[str]]) -> list[str]:\n",
    "class Timer:\n    \"\"\"Context manager that measures elapsed time.\"\"\"\n\n    def __enter__(self):\n",
    "def to_snake_case(name: str) -> str:\n",
};

static sd_status ds_new(sd_dataset **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? SD_OK : SD_ERR_NOMEM;
}

/* Appends one prompt; takes ownership of prompt (malloc'd) and of the
 * reference to messages, also on failure. */
static sd_status ds_push(sd_dataset *ds, char *prompt, json_t *messages, size_t len_chars)
{
    if (sd_grow(&ds->items, &ds->cap, ds->n + 1, sizeof *ds->items) != SD_OK) {
        free(prompt);
        json_decref(messages);
        return SD_ERR_NOMEM;
    }
    ds->items[ds->n++] = (sd_prompt){prompt, messages, len_chars, NULL, 0};
    return SD_OK;
}

static sd_status push_text(sd_dataset *ds, const char *text)
{
    char *p = strdup(text);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
    if (!p || !msgs) {
        free(p);
        json_decref(msgs);
        return SD_ERR_NOMEM;
    }
    return ds_push(ds, p, msgs, strlen(text));
}

/* Checks a "messages" array and joins its contents into a prompt text.
 * Returns the malloc'd text, or NULL with a reason in why. */
static char *join_messages(json_t *msgs, const char **why)
{
    size_t i, total = 1;
    json_t *m;
    if (json_array_size(msgs) == 0) {
        *why = "\"messages\" is empty";
        return NULL;
    }
    json_array_foreach(msgs, i, m)
    {
        json_t *c = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")) || !json_is_string(c)) {
            *why = "each message needs string \"role\" and \"content\"";
            return NULL;
        }
        total += json_string_length(c) + 1;
    }
    char *out = malloc(total), *w = out;
    if (!out) {
        *why = "out of memory";
        return NULL;
    }
    json_array_foreach(msgs, i, m)
    {
        json_t *c = json_object_get(m, "content");
        if (i > 0) *w++ = '\n';
        memcpy(w, json_string_value(c), json_string_length(c));
        w += json_string_length(c);
    }
    *w = '\0';
    return out;
}

/* Interprets one non-blank line. Returns SD_OK, SD_ERR_FORMAT with *why set,
 * or SD_ERR_NOMEM. */
static sd_status load_line(sd_dataset *ds, const char *line, size_t len, const char **why)
{
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!o) {
        *why = "not valid JSON";
        return SD_ERR_FORMAT;
    }
    sd_status st = SD_ERR_FORMAT;
    json_t *p = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages");
    if (!json_is_object(o)) {
        *why = "not a JSON object";
    } else if (json_is_string(p)) {
        st = push_text(ds, json_string_value(p));
    } else if (json_is_array(msgs)) {
        char *text = join_messages(msgs, why);
        if (text) {
            size_t n = strlen(text) - (json_array_size(msgs) - 1); /* minus joins */
            st = ds_push(ds, text, json_incref(msgs), n);
        }
    } else {
        *why = "needs a \"prompt\" string or a \"messages\" array";
    }
    json_decref(o);
    return st;
}

sd_status sd_dataset_load(const char *path, int strict, FILE *warn, sd_dataset **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return sd_seterr(err, errlen, SD_ERR_IO, "%s: %s", path, strerror(errno));
    sd_dataset *ds;
    if (ds_new(&ds) != SD_OK) {
        fclose(f);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0, bad = 0;
    ssize_t n;
    sd_status st = SD_OK;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
        if (len == 0) continue;
        const char *why = "";
        st = load_line(ds, line, len, &why);
        if (st == SD_ERR_NOMEM) break;
        if (st == SD_ERR_FORMAT) {
            bad++;
            if (strict) {
                sd_seterr(err, errlen, st, "%s:%zu: %s", path, lineno, why);
                break;
            }
            if (warn) fprintf(warn, "specd-bench: warning: %s:%zu: %s; line skipped\n", path, lineno, why);
            st = SD_OK;
        }
    }
    free(line);
    fclose(f);
    if (st == SD_ERR_NOMEM) sd_seterr(err, errlen, st, "out of memory reading %s", path);
    else if (st == SD_OK && ds->n == 0)
        st = sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: no usable prompt (%zu bad line%s)", path, bad,
                       bad == 1 ? "" : "s");
    if (st != SD_OK) {
        sd_dataset_free(ds);
        return st;
    }
    *out = ds;
    return SD_OK;
}

sd_status sd_dataset_builtin(sd_dataset **out)
{
    sd_dataset *ds;
    *out = NULL;
    if (ds_new(&ds) != SD_OK) return SD_ERR_NOMEM;
    for (size_t i = 0; i < sizeof builtin_prompts / sizeof builtin_prompts[0]; i++) {
        if (push_text(ds, builtin_prompts[i]) != SD_OK) {
            sd_dataset_free(ds);
            return SD_ERR_NOMEM;
        }
    }
    *out = ds;
    return SD_OK;
}

/* A length in base * (1 ± range), at least 1. */
static long random_len(sd_rng *rng, long base, double range)
{
    double lo = base * (1.0 - range), hi = base * (1.0 + range);
    long v = (long)(lo + (hi - lo) * sd_rng_uniform(rng) + 0.5);
    return v < 1 ? 1 : v;
}

sd_status sd_dataset_random(size_t n, long in_len, long out_len, double range, uint64_t seed, sd_dataset **out)
{
    *out = NULL;
    if (n < 1 || in_len < 1 || out_len < 1 || !(range >= 0 && range < 1)) return SD_ERR_ARG;
    sd_dataset *ds;
    if (ds_new(&ds) != SD_OK) return SD_ERR_NOMEM;
    sd_rng rng;
    sd_rng_seed(&rng, seed ^ 0x72616e646f6dULL);
    for (size_t i = 0; i < n; i++) {
        long len = random_len(&rng, in_len, range);
        json_t *ids = json_array();
        for (long k = 0; ids && k < len; k++)
            if (json_array_append_new(
                    ids, json_integer(SD_RANDOM_ID_LO +
                                      (json_int_t)(sd_rng_next(&rng) % (SD_RANDOM_ID_HI - SD_RANDOM_ID_LO)))) != 0) {
                json_decref(ids);
                ids = NULL;
            }
        char *text = ids ? strdup("") : NULL;
        if (!text || ds_push(ds, text, NULL, 0) != SD_OK) { /* ds_push frees text when it fails */
            json_decref(ids);
            sd_dataset_free(ds);
            return SD_ERR_NOMEM;
        }
        ds->items[ds->n - 1].ids = ids;
        ds->items[ds->n - 1].len_chars = (size_t)len;
        ds->items[ds->n - 1].max_tokens = random_len(&rng, out_len, range);
    }
    *out = ds;
    return SD_OK;
}

size_t sd_dataset_count(const sd_dataset *ds) { return ds ? ds->n : 0; }

const sd_prompt *sd_dataset_get(const sd_dataset *ds, size_t i) { return &ds->items[i]; }

void sd_dataset_free(sd_dataset *ds)
{
    if (!ds) return;
    for (size_t i = 0; i < ds->n; i++) {
        free(ds->items[i].prompt);
        json_decref(ds->items[i].messages);
        json_decref(ds->items[i].ids);
    }
    free(ds->items);
    free(ds);
}
