/* jinja.h — the subset of Jinja that chat templates use, rendered as
 * Hugging Face's apply_chat_template renders them (jinja2 with trim_blocks
 * and lstrip_blocks; the output compared with Python's jinja2 in the tests).
 *
 * Template syntax: text, {{ expr }}, {% stmt %}, {# comment #}, whitespace
 * control with '-' on either side of a tag. Statements: if / elif / else,
 * for (one or two targets, an `if` filter, else, the `loop` variable:
 * index, index0, revindex, revindex0, first, last, length, previtem,
 * nextitem), set (a name, a namespace attribute, or a block with endset),
 * generation (rendered as its body). Expressions: literals (strings,
 * numbers, true / false / none in either case, lists, dicts), names,
 * attributes, subscripts and slices, calls, filters, tests, the operators
 * of Python's precedence (or, and, not, in, not in, is [not], comparisons,
 * + - ~ * / // % **) and `a if c else b`. Globals: namespace(), range(),
 * raise_exception(), strftime_now(). Methods on strings (startswith,
 * endswith, split, strip / lstrip / rstrip, upper, lower, title,
 * capitalize, replace, find, count), dicts (items, keys, values, get) and
 * lists (append, index, count); filters and tests as listed in jinja_eval.c.
 * Not supported (a parse error names them): macros, call blocks, includes,
 * imports, extends / blocks, filter blocks, with, do.
 *
 * Values are jansson values (undefined: a missing name or member — false,
 * "" when printed, empty when iterated; arithmetic on it is an error, as
 * jinja2's default Undefined). Output is UTF-8; strings index and slice by
 * code point. */
#ifndef SD_ROUTER_JINJA_H
#define SD_ROUTER_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "status.h"

typedef struct sd_jinja sd_jinja;

/* Parses a template. SD_ERR_FORMAT with a message naming the line and what
 * is wrong; SD_ERR_NOMEM. */
sd_status sd_jinja_parse(const char *src, sd_jinja **out, char *err, size_t errlen);

/* Renders t with the variables of vars (an object; borrowed). *out is
 * malloc'd. SD_ERR_ARG with the message for a runtime error — among them
 * the template's own raise_exception(message) — SD_ERR_NOMEM. */
sd_status sd_jinja_render(const sd_jinja *t, json_t *vars, char **out, char *err, size_t errlen);

void sd_jinja_free(sd_jinja *t);

#endif
