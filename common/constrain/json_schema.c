/* json_schema.c — JSON Schema → the automaton's node table (json_schema.h).
 *
 * One pass over the schema builds the nodes (a $ref is an alias of the node
 * its target compiles to; every schema object compiles once, so recursion
 * through $ref ends); then the anyOf nodes get their first-byte tables and
 * every node its min_depth (a fixed point: an object needs one container
 * more than its deepest required property). */
#include "json_schema.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_mask.h"

#define JS_MAX_NEST 64 /* schema objects inside one another (and $ref hops) */

typedef struct jsc {
    sd_json_schema *s;
    uint32_t cap_nodes, n_items, cap_items, n_picks;
    size_t n_text, cap_text;
    const json_t *root;
    const json_t **memo; /* memo[i]: the schema object node i compiled from (NULL: none) */
    char **where;        /* ANYOF nodes: the place, for the first-byte pass's messages */
    uint16_t any;        /* the shared ANY node (SD_JS_NONE until needed) */
    int nest;
    char *err;
    size_t errlen;
    bool failed;
    bool nomem; /* the failure was an allocation's (SD_ERR_NOMEM, not SD_ERR_ARG) */
} jsc;

static int fail(jsc *c, const char *where, const char *fmt, ...)
{
    if (c->failed) return -1;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sd_seterr(c->err, c->errlen, SD_ERR_ARG, "JSON schema at %s: %s", where[0] ? where : "#", msg);
    c->failed = true;
    return -1;
}

/* fail() for an allocation that failed. */
static int fail_nomem(jsc *c, const char *where)
{
    if (!c->failed) c->nomem = true;
    return fail(c, where, "out of memory");
}

static int new_node(jsc *c, int kind, const json_t *memo)
{
    sd_json_schema *s = c->s;
    if (s->n_nodes == SD_JS_MAX_NODES) return fail(c, "#", "more than %d nodes", SD_JS_MAX_NODES);
    if (s->n_nodes == c->cap_nodes) {
        uint32_t cap = c->cap_nodes ? 2 * c->cap_nodes : 16;
        sd_js_node *n = realloc(s->nodes, cap * sizeof *n);
        const json_t **m = realloc(c->memo, cap * sizeof *m);
        char **w = realloc(c->where, cap * sizeof *w);
        if (n) s->nodes = n;
        if (m) c->memo = m;
        if (w) c->where = w;
        if (!n || !m || !w) return fail_nomem(c, "#");
        c->cap_nodes = cap;
    }
    uint32_t id = s->n_nodes++;
    s->nodes[id] = (sd_js_node){
        .kind = (uint8_t)kind, .child = SD_JS_NONE, .max = SD_JS_UNBOUNDED, .lo = INT64_MIN, .hi = INT64_MAX};
    c->memo[id] = memo;
    c->where[id] = NULL;
    return (int)id;
}

static int any_node(jsc *c)
{
    if (c->any == SD_JS_NONE) {
        int id = new_node(c, SD_JS_ANY, NULL);
        if (id >= 0) c->any = (uint16_t)id;
        return id;
    }
    return c->any;
}

/* Appends n items (zeroed) to the node; returns the first's index or -1. */
static int new_items(jsc *c, int node, uint32_t n)
{
    c->s->nodes[node].items = c->n_items;
    c->s->nodes[node].n = (uint16_t)n;
    if (n == 0) return (int)c->n_items;
    if (c->n_items + n > c->cap_items) {
        uint32_t cap = c->cap_items ? c->cap_items : 16;
        while (cap < c->n_items + n) cap *= 2;
        sd_js_item *it = realloc(c->s->items, cap * sizeof *it);
        if (!it) return fail_nomem(c, "#");
        c->s->items = it;
        c->cap_items = cap;
    }
    uint32_t first = c->n_items;
    memset(c->s->items + first, 0, n * sizeof *c->s->items);
    c->n_items += n;
    return (int)first;
}

/* Appends text to the texts; the item gets its place. */
static bool add_text(jsc *c, sd_js_item *it, const char *p, size_t n)
{
    if (c->n_text + n + 1 > c->cap_text) {
        size_t cap = c->cap_text ? c->cap_text : 256;
        while (cap < c->n_text + n + 1) cap *= 2;
        char *t = realloc(c->s->text, cap);
        if (!t) return fail_nomem(c, "#"), false;
        c->s->text = t;
        c->cap_text = cap;
    }
    memcpy(c->s->text + c->n_text, p, n);
    c->s->text[c->n_text + n] = 0;
    it->text = (uint32_t)c->n_text;
    it->len = (uint32_t)n;
    c->n_text += n + 1;
    return true;
}

static void sub(char *out, size_t cap, const char *where, const char *a, const char *b)
{
    snprintf(out, cap, "%s/%s%s%s", where, a, b ? "/" : "", b ? b : "");
}

static int compile(jsc *c, const json_t *sch, const char *where);

/* ---- keywords ---------------------------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {"title",  "description", "default",     "examples", "$schema",
                                          "$id",    "$comment",    "deprecated",  "readOnly", "writeOnly",
                                          "format", "$defs",       "definitions", NULL};
static const char *const SUPPORTED[] = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "items",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        NULL};

static bool in_list(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return true;
    return false;
}

/* Every keyword is supported or an annotation; those of `alone` (when set)
 * stand with annotations only. */
static bool check_keywords(jsc *c, const json_t *sch, const char *where, const char *alone)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sch, k, v)
    {
        if (in_list(ANNOTATIONS, k)) continue;
        if (!in_list(SUPPORTED, k)) return fail(c, where, "the keyword '%s' is not supported", k), false;
        if (alone && strcmp(k, alone)) return fail(c, where, "'%s' beside '%s' is not supported", k, alone), false;
    }
    return true;
}

/* A non-negative integer keyword (absent: dflt). */
static bool get_count(jsc *c, const json_t *sch, const char *key, const char *where, uint32_t dflt, uint32_t *out)
{
    json_t *v = json_object_get(sch, key);
    *out = dflt;
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(c, where, "'%s' must be a non-negative integer", key), false;
    json_int_t x = json_integer_value(v);
    *out = x >= (json_int_t)SD_JS_UNBOUNDED ? SD_JS_UNBOUNDED - 1 : (uint32_t)x;
    return true;
}

/* ---- $ref ---------------------------------------------------------------------------------- */

/* The target of a "#/a/b" pointer in the root document (RFC 6901 escapes). */
static const json_t *resolve(jsc *c, const char *ref, const char *where)
{
    if (ref[0] != '#') return fail(c, where, "$ref '%s' is not in this schema (only \"#...\" pointers)", ref), NULL;
    const json_t *v = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return fail(c, where, "$ref '%s' is not a JSON pointer", ref), NULL;
        char tok[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(v)) v = json_object_get(v, tok);
        else if (json_is_array(v)) {
            char *end;
            long i = strtol(tok, &end, 10);
            v = *tok && !*end && i >= 0 ? json_array_get(v, (size_t)i) : NULL;
        } else v = NULL;
        if (!v) return fail(c, where, "$ref '%s' points nowhere", ref), NULL;
    }
    return v;
}

/* ---- the kinds ----------------------------------------------------------------------------- */

static bool of_type(const json_t *v, const char *type)
{
    if (!strcmp(type, "string")) return json_is_string(v);
    if (!strcmp(type, "number")) return json_is_number(v);
    if (!strcmp(type, "integer")) return json_is_integer(v);
    if (!strcmp(type, "boolean")) return json_is_boolean(v);
    if (!strcmp(type, "null")) return json_is_null(v);
    if (!strcmp(type, "object")) return json_is_object(v);
    return !strcmp(type, "array") && json_is_array(v);
}

/* Whether v is of one of the schema's types (no type: any). */
static bool type_allows(const json_t *sch, const json_t *v)
{
    json_t *t = json_object_get(sch, "type"), *e;
    size_t i;
    if (json_is_string(t)) return of_type(v, json_string_value(t));
    if (!json_is_array(t)) return true;
    json_array_foreach(t, i, e) if (json_is_string(e) && of_type(v, json_string_value(e))) return true;
    return false;
}

static int compile_enum(jsc *c, const json_t *sch, int id, const char *where)
{
    json_t *cv = json_object_get(sch, "const"), *ev = json_object_get(sch, "enum");
    json_t *vals = cv ? json_pack("[O]", cv) : json_incref(ev);
    if (!json_is_array(vals) || (cv && ev)) {
        json_decref(vals);
        return fail(c, where, cv ? "'const' beside 'enum' is not supported" : "'enum' must be an array");
    }
    size_t i, n = 0;
    json_t *v;
    json_array_foreach(vals, i, v) n += type_allows(sch, v);
    if (n == 0 || n > SD_JS_MAX_ENUM) {
        json_decref(vals);
        return fail(c, where, n ? "more than %d enum values" : "no enum value is of the schema's type", SD_JS_MAX_ENUM);
    }
    c->s->nodes[id].kind = SD_JS_ENUM;
    int first = new_items(c, id, (uint32_t)n);
    n = 0;
    json_array_foreach(vals, i, v)
    {
        if (first < 0 || !type_allows(sch, v)) continue;
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        c->s->items[first + (int)n].node = SD_JS_NONE;
        bool ok = text && add_text(c, &c->s->items[first + (int)n++], text, strlen(text));
        free(text);
        if (!ok) first = fail_nomem(c, where);
    }
    json_decref(vals);
    return first < 0 ? -1 : id;
}

static int compile_anyof(jsc *c, const json_t *list, int id, const char *where, const char *kw)
{
    if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > 256)
        return fail(c, where, "'%s' must be an array of 1 to 256 schemas", kw);
    c->s->nodes[id].kind = SD_JS_ANYOF;
    c->where[id] = strdup(where);
    uint32_t n = (uint32_t)json_array_size(list);
    if (!c->where[id] || new_items(c, id, n) < 0) return fail_nomem(c, where);
    for (uint32_t i = 0; i < n; i++) {
        char w[512];
        snprintf(w, sizeof w, "%s/%s/%u", where, kw, i);
        int a = compile(c, json_array_get(list, i), w);
        if (a < 0) return -1;
        c->s->items[c->s->nodes[id].items + i].node = (uint16_t)a;
    }
    return id;
}

static int compile_object(jsc *c, const json_t *sch, int id, const char *where)
{
    json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required");
    json_t *extra = json_object_get(sch, "additionalProperties"), *v;
    char w[512];
    if (props && !json_is_object(props)) return fail(c, where, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, where, "'required' must be an array of names");
    int child = SD_JS_NONE;
    sub(w, sizeof w, where, "additionalProperties", NULL);
    if ((!extra && !props) || json_is_true(extra)) child = any_node(c);
    else if (extra && !json_is_false(extra)) child = compile(c, extra, w);
    if (child < 0) return -1;
    /* the declared properties, then the required names not among them */
    size_t n = json_object_size(props), i;
    json_array_foreach(req, i, v)
    {
        if (!json_is_string(v)) return fail(c, where, "'required' must be an array of names");
        if (!json_object_get(props, json_string_value(v))) n++;
    }
    if (n > SD_JS_MAX_PROPS) return fail(c, where, "more than %d properties", SD_JS_MAX_PROPS);
    c->s->nodes[id].child = (uint16_t)child;
    int first = new_items(c, id, (uint32_t)n);
    if (first < 0) return -1;
    const char *k;
    uint32_t k_i = 0;
    json_object_foreach(props, k, v)
    {
        sub(w, sizeof w, where, "properties", k);
        int p = compile(c, v, w);
        if (p < 0) return -1;
        c->s->items[first + (int)k_i++].node = (uint16_t)p;
    }
    json_array_foreach(req, i, v)
    {
        if (json_object_get(props, json_string_value(v))) continue;
        if (child == SD_JS_NONE)
            return fail(c, where, "required property '%s' is not allowed (additionalProperties)", json_string_value(v));
        c->s->items[first + (int)k_i++].node = (uint16_t)child;
    }
    return id;
}

/* Names of the object's properties (in the order compile_object set them)
 * and its required bits. */
static int object_names(jsc *c, const json_t *sch, int id, const char *where)
{
    json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required"), *v;
    const char *names[SD_JS_MAX_PROPS];
    uint32_t n = 0;
    const char *k;
    size_t i;
    json_object_foreach(props, k, v) names[n++] = k;
    json_array_foreach(req, i, v) if (!json_object_get(props, json_string_value(v))) names[n++] = json_string_value(v);
    sd_js_node *nd = &c->s->nodes[id];
    for (uint32_t j = 0; j < n; j++) {
        for (const unsigned char *p = (const unsigned char *)names[j]; *p; p++)
            if (*p < 0x20) return fail(c, where, "property name with a control character");
        json_t *s = json_string(names[j]);
        char *text = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        json_decref(s);
        sd_js_item *it = &c->s->items[nd->items + j];
        bool ok = text && add_text(c, it, text + 1, strlen(text) - 2);
        free(text);
        if (!ok) return fail(c, where, "property name '%s' cannot be written", names[j]);
        json_array_foreach(req, i, v) if (!strcmp(json_string_value(v), names[j])) nd->required |= 1ull << j;
    }
    return id;
}

static int compile_array(jsc *c, const json_t *sch, int id, const char *where)
{
    json_t *items = json_object_get(sch, "items");
    char w[512];
    sd_js_node tmp = {0};
    if (!get_count(c, sch, "minItems", where, 0, &tmp.min) ||
        !get_count(c, sch, "maxItems", where, SD_JS_UNBOUNDED, &tmp.max))
        return -1;
    if (tmp.min > 65535) return fail(c, where, "'minItems' above 65535 is not supported");
    if (tmp.max > 65535) tmp.max = SD_JS_UNBOUNDED;
    if (tmp.min > tmp.max) return fail(c, where, "'minItems' exceeds 'maxItems'");
    if (json_is_array(items)) return fail(c, where, "'items' as an array (tuples) is not supported");
    if (json_is_false(items)) tmp.max = 0;
    if (tmp.min > tmp.max) return fail(c, where, "'items': false with 'minItems' above 0");
    sub(w, sizeof w, where, "items", NULL);
    int child = items && !json_is_false(items) ? compile(c, items, w) : any_node(c);
    if (child < 0) return -1;
    sd_js_node *nd = &c->s->nodes[id];
    nd->child = (uint16_t)child, nd->min = tmp.min, nd->max = tmp.max;
    return id;
}

static int compile_string(jsc *c, const json_t *sch, int id, const char *where)
{
    uint32_t lo, hi;
    if (!get_count(c, sch, "minLength", where, 0, &lo) || !get_count(c, sch, "maxLength", where, SD_JS_UNBOUNDED, &hi))
        return -1;
    if (lo > hi) return fail(c, where, "'minLength' exceeds 'maxLength'");
    c->s->nodes[id].min = lo, c->s->nodes[id].max = hi;
    return id;
}

/* An integer's bound: v rounded towards the allowed side (up for a lower
 * bound, down for an upper one; an exclusive one moved past v), clamped to
 * int64. */
static int64_t int_bound(const json_t *v, bool lower, bool exclusive)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (exclusive && lower) return x == INT64_MAX ? INT64_MAX : x + 1; /* (INT64_MAX + 1: no value, below) */
        if (exclusive) return x == INT64_MIN ? INT64_MIN : x - 1;
        return x;
    }
    double d = json_real_value(v), r = lower ? ceil(d) : floor(d);
    if (exclusive && r == d) r += lower ? 1.0 : -1.0;
    if (r >= 9223372036854775807.0) return INT64_MAX;
    if (r <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)r;
}

static bool has_bounds(const json_t *sch)
{
    return json_object_get(sch, "minimum") || json_object_get(sch, "maximum") ||
           json_object_get(sch, "exclusiveMinimum") || json_object_get(sch, "exclusiveMaximum");
}

/* A bound of a number that is not an integer: a whole number (clamped to
 * int64), exclusive or not; the tighter of two on the same side. */
static void number_bound(sd_js_node *nd, double d, bool lower, bool excl)
{
    int64_t b = d >= 9223372036854775807.0 ? INT64_MAX : d <= -9223372036854775808.0 ? INT64_MIN : (int64_t)d;
    uint8_t flag = lower ? SD_JS_LO_OPEN : SD_JS_HI_OPEN;
    int64_t *at = lower ? &nd->lo : &nd->hi;
    bool tighter = lower ? b > *at : b < *at;
    if (tighter || (b == *at && excl)) {
        *at = b;
        nd->open = (uint8_t)((nd->open & ~flag) | (excl ? flag : 0));
    }
}

/* minimum / maximum / exclusiveMinimum / exclusiveMaximum of an integer
 * or a number. */
static int compile_bounds(jsc *c, const json_t *sch, int id, const char *where)
{
    static const char *const KEYS[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    sd_js_node *nd = &c->s->nodes[id];
    bool integer = nd->kind == SD_JS_INTEGER, empty = false;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(sch, KEYS[i]);
        if (!v) continue;
        if (!json_is_number(v))
            return fail(c, where, "'%s' must be a number (draft 4's boolean form is not supported)", KEYS[i]);
        bool lower = i < 2, excl = i % 2;
        double d = json_number_value(v);
        if (!integer && d != floor(d))
            return fail(c, where,
                        "'%s' %g on a number: bounds of numbers that are not integers must be whole "
                        "numbers",
                        KEYS[i], d);
        if (!integer) {
            number_bound(nd, d, lower, excl);
            continue;
        }
        int64_t b = int_bound(v, lower, excl);
        /* an exclusive bound at the end of int64 leaves no value on its side */
        empty |= excl && json_is_integer(v) && json_integer_value(v) == (lower ? INT64_MAX : INT64_MIN);
        if (lower && b > nd->lo) nd->lo = b;
        if (!lower && b < nd->hi) nd->hi = b;
    }
    if (empty || nd->lo > nd->hi || (nd->lo == nd->hi && nd->open))
        return fail(c, where, "no %s lies within 'minimum' / 'maximum' bounds", integer ? "integer" : "number");
    return id;
}

/* A node of one type; the schema's other keywords as they apply to it. */
static int compile_typed(jsc *c, const json_t *sch, const char *type, int id, const char *where)
{
    static const struct {
        const char *name;
        int kind;
    } TYPES[] = {{"object", SD_JS_OBJECT}, {"array", SD_JS_ARRAY},     {"string", SD_JS_STRING},
                 {"number", SD_JS_NUMBER}, {"integer", SD_JS_INTEGER}, {"boolean", SD_JS_BOOLEAN},
                 {"null", SD_JS_NULL}};
    int kind = -1;
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
        if (!strcmp(TYPES[i].name, type)) kind = TYPES[i].kind;
    if (kind < 0) return fail(c, where, "unknown type '%s'", type);
    if (id < 0 && (id = new_node(c, kind, NULL)) < 0) return -1;
    c->s->nodes[id].kind = (uint8_t)kind;
    if (kind == SD_JS_OBJECT) return compile_object(c, sch, id, where) < 0 ? -1 : object_names(c, sch, id, where);
    if (kind == SD_JS_ARRAY) return compile_array(c, sch, id, where);
    if (kind == SD_JS_STRING) return compile_string(c, sch, id, where);
    if (kind == SD_JS_INTEGER || kind == SD_JS_NUMBER) return compile_bounds(c, sch, id, where);
    return id;
}

/* The type a schema without "type" is: by its keywords, else any. */
static const char *implied_type(const json_t *sch)
{
    static const char *const OBJ[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const ARR[] = {"items", "minItems", "maxItems", NULL};
    static const char *const STR[] = {"minLength", "maxLength", NULL};
    if (has_bounds(sch)) return "number";
    for (int i = 0; OBJ[i]; i++)
        if (json_object_get(sch, OBJ[i])) return "object";
    for (int i = 0; ARR[i]; i++)
        if (json_object_get(sch, ARR[i])) return "array";
    for (int i = 0; STR[i]; i++)
        if (json_object_get(sch, STR[i])) return "string";
    return NULL;
}

/* "type": a name or a list of names (a list: the alternatives, integer
 * dropped beside number). */
static int compile_types(jsc *c, const json_t *sch, int id, const char *where)
{
    json_t *t = json_object_get(sch, "type"), *e;
    const char *one = json_is_string(t) ? json_string_value(t) : t ? NULL : implied_type(sch);
    if (!t && !one) {
        c->s->nodes[id].kind = SD_JS_ANY;
        return id;
    }
    if (one) return compile_typed(c, sch, one, id, where);
    if (!json_is_array(t) || json_array_size(t) == 0 || json_array_size(t) > 7)
        return fail(c, where, "'type' must be a name or a list of names");
    bool number = false;
    size_t i, n = 0;
    json_array_foreach(t, i, e)
    {
        if (!json_is_string(e)) return fail(c, where, "'type' must be a name or a list of names");
        number |= !strcmp(json_string_value(e), "number");
    }
    c->s->nodes[id].kind = SD_JS_ANYOF;
    c->where[id] = strdup(where);
    int first = new_items(c, id, (uint32_t)(json_array_size(t)));
    if (first < 0 || !c->where[id]) return fail_nomem(c, where);
    json_array_foreach(t, i, e)
    {
        if (number && !strcmp(json_string_value(e), "integer")) continue;
        int a = compile_typed(c, sch, json_string_value(e), -1, where);
        if (a < 0) return -1;
        c->s->items[first + (int)n++].node = (uint16_t)a;
    }
    c->s->nodes[id].n = (uint16_t)n;
    return id;
}

static int compile(jsc *c, const json_t *sch, const char *where)
{
    if (json_is_true(sch)) return any_node(c);
    if (json_is_false(sch)) return fail(c, where, "the schema false accepts nothing");
    if (!json_is_object(sch)) return fail(c, where, "a schema must be an object or a boolean");
    for (uint32_t i = 0; i < c->s->n_nodes; i++)
        if (c->memo[i] == sch) return (int)i;
    if (c->nest >= JS_MAX_NEST) return fail(c, where, "schemas nested (or $ref hops) more than %d deep", JS_MAX_NEST);
    c->nest++;
    int id;
    json_t *ref = json_object_get(sch, "$ref"), *all = json_object_get(sch, "allOf");
    json_t *any = json_object_get(sch, "anyOf"), *one = json_object_get(sch, "oneOf");
    char w[512];
    if (ref) {
        const json_t *target = json_is_string(ref) && check_keywords(c, sch, where, "$ref")
                                   ? resolve(c, json_string_value(ref), where)
                                   : NULL;
        snprintf(w, sizeof w, "%s", json_is_string(ref) ? json_string_value(ref) : "#");
        id = target ? compile(c, target, w) : json_is_string(ref) ? -1 : fail(c, where, "'$ref' must be a string");
    } else if (all) {
        if (!check_keywords(c, sch, where, "allOf")) id = -1;
        else if (!json_is_array(all) || json_array_size(all) != 1)
            id = fail(c, where, "'allOf' with other than one schema is not supported");
        else sub(w, sizeof w, where, "allOf", "0"), id = compile(c, json_array_get(all, 0), w);
    } else if (!check_keywords(c, sch, where, any ? "anyOf" : one ? "oneOf" : NULL)) {
        id = -1;
    } else if ((id = new_node(c, SD_JS_ANY, sch)) >= 0) {
        if (any || one) id = compile_anyof(c, any ? any : one, id, where, any ? "anyOf" : "oneOf");
        else if (json_object_get(sch, "enum") || json_object_get(sch, "const")) id = compile_enum(c, sch, id, where);
        else id = compile_types(c, sch, id, where);
    }
    c->nest--;
    return c->failed ? -1 : id;
}

/* ---- after the pass: first bytes, min_depth -------------------------------------------------- */

bool sd_json_schema_starts(const sd_json_schema *s, uint16_t node, unsigned char c)
{
    const sd_js_node *nd = &s->nodes[node];
    switch (nd->kind) {
    case SD_JS_ANY:
        return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' ||
               c == 'n';
    case SD_JS_OBJECT:
    case SD_JS_UNION: return c == '{';
    case SD_JS_ARRAY: return c == '[';
    case SD_JS_STRING: return c == '"';
    case SD_JS_NUMBER:
    case SD_JS_INTEGER: return (c == '-' && nd->lo < 0) || (c >= '0' && c <= '9');
    case SD_JS_BOOLEAN: return c == 't' || c == 'f';
    case SD_JS_NULL: return c == 'n';
    case SD_JS_ENUM:
        for (uint32_t i = 0; i < nd->n; i++)
            if ((unsigned char)s->text[s->items[nd->items + i].text] == c) return true;
        return false;
    default: return s->picks && s->picks[nd->pick + c] != SD_JS_NONE;
    }
}

/* The object alternatives of an anyOf (collected by fill_picks). */
typedef struct objs {
    uint16_t id[256];
    int n;
} objs;

/* The index of the property named as item `name` in object node `obj`, -1
 * when it has none. */
static int prop_index(const sd_json_schema *s, uint16_t obj, uint32_t text, uint32_t len)
{
    const sd_js_node *nd = &s->nodes[obj];
    for (int i = 0; i < nd->n; i++) {
        const sd_js_item *it = &s->items[nd->items + (uint32_t)i];
        if (it->len == len && !memcmp(s->text + it->text, s->text + text, len)) return i;
    }
    return -1;
}

/* Property p of alternative 0 discriminates: every alternative requires it,
 * with string enum values no two alternatives share. Returns the values in
 * all, or -1. */
static int discriminates(const sd_json_schema *s, const objs *o, int p)
{
    const sd_js_item *name = &s->items[s->nodes[o->id[0]].items + (uint32_t)p];
    int total = 0;
    for (int k = 0; k < o->n; k++) {
        const sd_js_node *a = &s->nodes[o->id[k]];
        int q = prop_index(s, o->id[k], name->text, name->len);
        if (q < 0 || !(a->required >> q & 1)) return -1;
        const sd_js_node *e = &s->nodes[s->items[a->items + (uint32_t)q].node];
        if (e->kind != SD_JS_ENUM) return -1;
        for (int j = 0; j < e->n; j++) {
            const sd_js_item *v = &s->items[e->items + (uint32_t)j];
            if (s->text[v->text] != '"') return -1;
            for (int k2 = 0; k2 < k; k2++) { /* not among an earlier alternative's values */
                const sd_js_node *b = &s->nodes[o->id[k2]];
                const sd_js_node *f =
                    &s->nodes[s->items[b->items + (uint32_t)prop_index(s, o->id[k2], name->text, name->len)].node];
                for (int i = 0; i < f->n; i++) {
                    const sd_js_item *w = &s->items[f->items + (uint32_t)i];
                    if (w->len == v->len && !memcmp(s->text + w->text, s->text + v->text, v->len)) return -1;
                }
            }
        }
        total += e->n;
    }
    return total;
}

/* A discriminated union of object alternatives: a UNION node whose one
 * (required) property is the discriminator, its values those of every
 * alternative, each value's item naming its alternative (json_mask.c
 * switches to it once the value is read). Returns the node or -1. */
static int union_of(jsc *c, const objs *o, const char *where)
{
    sd_json_schema *s = c->s;
    int p = -1, total = -1;
    for (int i = 0; i < s->nodes[o->id[0]].n && total < 0; i++)
        if ((total = discriminates(s, o, i)) >= 0) p = i;
    if (total < 0 || total > SD_JS_MAX_ENUM)
        return fail(c, where,
                    "alternatives that are objects need a discriminator: a property each of them "
                    "requires, with string values (const / enum, %d in all at most) no two of them share",
                    SD_JS_MAX_ENUM);
    sd_js_item name = s->items[s->nodes[o->id[0]].items + (uint32_t)p];
    int e = new_node(c, SD_JS_ENUM, NULL), u = e < 0 ? -1 : new_node(c, SD_JS_UNION, NULL);
    int first = u < 0 ? -1 : new_items(c, e, (uint32_t)total), m = 0;
    if (first < 0 || new_items(c, u, 1) < 0) return -1;
    for (int k = 0; k < o->n; k++) {
        const sd_js_node *a = &s->nodes[o->id[k]];
        const sd_js_node *en =
            &s->nodes[s->items[a->items + (uint32_t)prop_index(s, o->id[k], name.text, name.len)].node];
        for (int j = 0; j < en->n; j++) {
            s->items[first + m] = s->items[en->items + (uint32_t)j];
            s->items[first + m++].node = o->id[k];
        }
    }
    s->items[s->nodes[u].items] = (sd_js_item){.text = name.text, .len = name.len, .node = (uint16_t)e};
    s->nodes[u].required = 1;
    return u;
}

/* Fills the ANYOF node's table from its alternatives (nested anyOf ones
 * flattened; the object ones collected in o). */
static bool fill_picks(jsc *c, uint16_t *tab, uint16_t node, int hops, const char *where, objs *o)
{
    const sd_json_schema *s = c->s;
    const sd_js_node *nd = &s->nodes[node];
    if (hops > JS_MAX_NEST) return fail(c, where, "anyOf nested in itself"), false;
    for (uint32_t i = 0; i < nd->n; i++) {
        uint16_t a = s->items[nd->items + i].node;
        if (s->nodes[a].kind == SD_JS_ANYOF) {
            if (!fill_picks(c, tab, a, hops + 1, where, o)) return false;
            continue;
        }
        if (s->nodes[a].kind == SD_JS_OBJECT && o->n < 256) {
            o->id[o->n++] = a;
            continue;
        }
        for (int b = 0; b < 256; b++) {
            if (!sd_json_schema_starts(s, a, (unsigned char)b)) continue;
            if (tab[b] != SD_JS_NONE && tab[b] != a)
                return fail(c, where,
                            "two alternatives may begin with '%c': alternatives must differ in type "
                            "(or their enum values in their first character)",
                            b),
                       false;
            tab[b] = a;
        }
    }
    return true;
}

static bool make_picks(jsc *c)
{
    sd_json_schema *s = c->s;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_nodes; i++) n += s->nodes[i].kind == SD_JS_ANYOF;
    if (!n) return true;
    s->picks = malloc((size_t)n * 256 * sizeof *s->picks);
    if (!s->picks) return fail_nomem(c, "#"), false;
    n = 0;
    uint32_t n_nodes = s->n_nodes; /* unions add nodes: not anyOf ones */
    for (uint32_t i = 0; i < n_nodes; i++) {
        if (s->nodes[i].kind != SD_JS_ANYOF) continue;
        s->nodes[i].pick = n * 256;
        uint16_t *tab = s->picks + (size_t)n++ * 256;
        for (int b = 0; b < 256; b++) tab[b] = SD_JS_NONE;
        objs o = {.n = 0};
        const char *where = c->where[i] ? c->where[i] : "#";
        if (!fill_picks(c, tab, (uint16_t)i, 0, where, &o)) return false;
        int obj = o.n == 1 ? (int)o.id[0] : o.n > 1 ? union_of(c, &o, where) : (int)SD_JS_NONE;
        if (obj < 0) return false;
        if (obj != (int)SD_JS_NONE && tab['{'] != SD_JS_NONE)
            return fail(c, where, "two alternatives may begin with '{': alternatives must differ in type"), false;
        if (obj != (int)SD_JS_NONE) tab['{'] = (uint16_t)obj;
    }
    return true;
}

static uint8_t depth_of(const sd_json_schema *s, const sd_js_node *nd)
{
    unsigned d = 0;
    switch (nd->kind) {
    case SD_JS_OBJECT:
        for (uint32_t i = 0; i < nd->n; i++)
            if (nd->required >> i & 1) {
                unsigned p = s->nodes[s->items[nd->items + i].node].min_depth;
                d = p > d ? p : d;
            }
        return d >= 255 ? 255 : (uint8_t)(d + 1);
    case SD_JS_ARRAY: d = nd->min ? s->nodes[nd->child].min_depth : 0; return d >= 255 ? 255 : (uint8_t)(d + 1);
    case SD_JS_UNION: /* the least of its alternatives (its values' items name them) */
        d = 255;
        for (uint32_t i = 0; i < s->nodes[s->items[nd->items].node].n; i++) {
            unsigned a = s->nodes[s->items[s->nodes[s->items[nd->items].node].items + i].node].min_depth;
            d = a < d ? a : d;
        }
        return (uint8_t)d;
    case SD_JS_ANYOF:
        d = 255;
        for (int b = 0; b < 256; b++)
            if (s->picks[nd->pick + b] != SD_JS_NONE && s->nodes[s->picks[nd->pick + b]].min_depth < d)
                d = s->nodes[s->picks[nd->pick + b]].min_depth;
        return (uint8_t)d;
    default: return 0;
    }
}

/* min_depth: the least fixed point from "none fits" upwards. */
static void min_depths(sd_json_schema *s)
{
    for (uint32_t i = 0; i < s->n_nodes; i++) s->nodes[i].min_depth = 255;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < s->n_nodes; i++) {
            uint8_t d = depth_of(s, &s->nodes[i]);
            if (d > SD_JSON_MAX_DEPTH) d = 255;
            if (d < s->nodes[i].min_depth) s->nodes[i].min_depth = d, changed = true;
        }
    }
}

sd_status sd_json_schema_compile(const json_t *schema, sd_json_schema **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_json_schema *s = calloc(1, sizeof *s);
    jsc c = {.s = s, .root = schema, .any = SD_JS_NONE, .err = err, .errlen = errlen};
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "JSON schema: out of memory");
    int root = compile(&c, schema, "#");
    if (root >= 0 && make_picks(&c)) {
        min_depths(s);
        s->root = (uint16_t)root;
        if (s->nodes[root].min_depth > SD_JSON_MAX_DEPTH)
            fail(&c, "#", "no value of it fits within %d nested containers", SD_JSON_MAX_DEPTH);
    }
    for (uint32_t i = 0; i < s->n_nodes; i++) free(c.where[i]);
    free(c.where);
    free(c.memo);
    if (root < 0 || c.failed) {
        sd_json_schema_free(s);
        return c.nomem ? SD_ERR_NOMEM : SD_ERR_ARG;
    }
    *out = s;
    return SD_OK;
}

sd_status sd_json_schema_parse(const char *text, size_t len, sd_json_schema **out, char *err, size_t errlen)
{
    *out = NULL;
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &e);
    if (!v) return sd_seterr(err, errlen, SD_ERR_ARG, "JSON schema: not JSON (%s)", e.text);
    sd_status st = sd_json_schema_compile(v, out, err, errlen);
    json_decref(v);
    return st;
}

void sd_json_schema_free(sd_json_schema *s)
{
    if (!s) return;
    free(s->nodes);
    free(s->items);
    free(s->text);
    free(s->picks);
    free(s);
}

static const sd_js_node OBJECT_NODES[2] = {
    {.kind = SD_JS_ANY, .child = SD_JS_NONE, .max = SD_JS_UNBOUNDED},
    {.kind = SD_JS_OBJECT, .min_depth = 1, .child = 0, .max = SD_JS_UNBOUNDED},
};
static const sd_json_schema OBJECT_SCHEMA = {.nodes = (sd_js_node *)OBJECT_NODES, .n_nodes = 2, .root = 1};
static const sd_json_schema OBJECT_COMPACT = {
    .nodes = (sd_js_node *)OBJECT_NODES, .n_nodes = 2, .root = 1, .compact = true};

const sd_json_schema *sd_json_schema_object(void) { return &OBJECT_SCHEMA; }

const sd_json_schema *sd_json_schema_object_compact(void) { return &OBJECT_COMPACT; }
