/* jinja_eval.c — rendering a parsed template (see jinja.h). Values are
 * jansson values, NULL meaning undefined; every evaluation returns a new
 * reference (or NULL). Printing and comparisons follow Python: str() of
 * numbers, True / False / None, repr() inside lists and dicts. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "jinja.h"
#include "jinja_ast.h"
#include "strbuf.h"

typedef struct {
    json_t **scope; /* variables: innermost last */
    size_t n_scope, cap_scope;
    char *err;
    size_t errlen;
    bool failed;
    unsigned long iterations; /* loop iterations so far (J_MAX_ITERATIONS) */
} ctx;

/* A render is a prompt: more loop iterations than this is a runaway template (nested ranges). */
#define J_MAX_ITERATIONS 10000000UL

static json_t *fail(ctx *c, const j_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static json_t *fail(ctx *c, const j_node *n, const char *fmt, ...)
{
    if (c->failed) return NULL;
    c->failed = true;
    int k = snprintf(c->err, c->errlen, "chat template line %d: ", n ? n->line : 0);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < c->errlen) vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return NULL;
}

static json_t *eval(ctx *c, const j_node *n);
static bool render_list(ctx *c, const j_list *l, sd_buf *out);

/* ---------------------------------------------------------------- values */

static bool truthy(const json_t *v)
{
    if (!v) return false;
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return false;
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    }
    return false;
}

static bool is_num(const json_t *v) { return v && (json_is_integer(v) || json_is_real(v)); }
static double num(const json_t *v) { return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v); }

/* Python's repr of a float. */
static void fmt_double(double d, char *b, size_t n)
{
    if (isnan(d)) {
        snprintf(b, n, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(b, n, d > 0 ? "inf" : "-inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, n, "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
    }
    if (!strpbrk(b, ".e")) strncat(b, ".0", n - strlen(b) - 1);
}

static void str_of(const json_t *v, sd_buf *out, bool repr);

static void repr_string(const char *s, size_t len, sd_buf *out)
{
    char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
    sd_buf_add(out, &q, 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '\\' || ch == (unsigned char)q) snprintf(e, sizeof e, "\\%c", ch);
        else if (ch == '\n') snprintf(e, sizeof e, "\\n");
        else if (ch == '\t') snprintf(e, sizeof e, "\\t");
        else if (ch == '\r') snprintf(e, sizeof e, "\\r");
        else if (ch < 0x20 || ch == 0x7f) snprintf(e, sizeof e, "\\x%02x", ch);
        else e[0] = (char)ch, e[1] = '\0';
        sd_buf_adds(out, e);
    }
    sd_buf_add(out, &q, 1);
}

/* Python's str() (repr: its repr(), as inside a list). */
static void str_of(const json_t *v, sd_buf *out, bool repr)
{
    char b[64];
    if (!v) return;
    switch (json_typeof(v)) {
    case JSON_NULL: sd_buf_adds(out, "None"); break;
    case JSON_TRUE: sd_buf_adds(out, "True"); break;
    case JSON_FALSE: sd_buf_adds(out, "False"); break;
    case JSON_INTEGER:
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
        sd_buf_adds(out, b);
        break;
    case JSON_REAL:
        fmt_double(json_real_value(v), b, sizeof b);
        sd_buf_adds(out, b);
        break;
    case JSON_STRING:
        if (repr) repr_string(json_string_value(v), json_string_length(v), out);
        else sd_buf_add(out, json_string_value(v), json_string_length(v));
        break;
    case JSON_ARRAY: {
        sd_buf_adds(out, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sd_buf_adds(out, ", ");
            str_of(json_array_get(v, i), out, true);
        }
        sd_buf_adds(out, "]");
        break;
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        sd_buf_adds(out, "{");
        json_object_foreach((json_t *)v, k, x)
        {
            if (!first) sd_buf_adds(out, ", ");
            first = false;
            repr_string(k, strlen(k), out);
            sd_buf_adds(out, ": ");
            str_of(x, out, true);
        }
        sd_buf_adds(out, "}");
        break;
    }
    }
}

static json_t *to_string(const json_t *v)
{
    sd_buf b = {0};
    str_of(v, &b, false);
    char *s = sd_buf_take(&b);
    json_t *r = s ? json_string(s) : NULL;
    free(s);
    return r;
}

static bool eq(const json_t *a, const json_t *b)
{
    if (!a || !b) return !a && !b;
    if (is_num(a) && is_num(b)) return num(a) == num(b);
    if (json_is_boolean(a) && json_is_boolean(b)) return json_is_true(a) == json_is_true(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* -1 / 0 / 1, or 2 when a and b do not order. */
static int order(const json_t *a, const json_t *b)
{
    if (is_num(a) && is_num(b)) return num(a) < num(b) ? -1 : num(a) > num(b);
    if (json_is_string(a) && json_is_string(b)) {
        int r = strcmp(json_string_value(a), json_string_value(b));
        return r < 0 ? -1 : r > 0;
    }
    return 2;
}

/* ---------------------------------------------------------------- strings (UTF-8 code points) */

static size_t utf8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offset of code point k (k <= count). */
static size_t utf8_offset(const char *s, size_t len, size_t k)
{
    size_t i = 0;
    for (; i < len && k > 0; k--) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

static bool in_set(char ch, const char *set) { return set ? strchr(set, ch) != NULL : isspace((unsigned char)ch); }

/* strip / lstrip / rstrip with Python's chars argument (NULL: whitespace). */
static json_t *strip(const json_t *s, const char *chars, bool left, bool right)
{
    const char *p = json_string_value(s);
    size_t a = 0, b = json_string_length(s);
    while (left && a < b && in_set(p[a], chars)) a++;
    while (right && b > a && in_set(p[b - 1], chars)) b--;
    return json_stringn(p + a, b - a);
}

static json_t *split(const json_t *s, const json_t *sep, long long maxsplit)
{
    const char *p = json_string_value(s), *end = p + json_string_length(s);
    json_t *out = json_array();
    if (!sep || json_is_null(sep)) { /* runs of whitespace, none at the ends */
        while (p < end) {
            while (p < end && isspace((unsigned char)*p)) p++;
            if (p >= end) break;
            const char *q = p;
            if (maxsplit >= 0 && (long long)json_array_size(out) >= maxsplit) q = end;
            else
                while (q < end && !isspace((unsigned char)*q)) q++;
            json_array_append_new(out, json_stringn(p, (size_t)(q - p)));
            p = q;
        }
        return out;
    }
    const char *d = json_string_value(sep);
    size_t dl = json_string_length(sep);
    if (dl == 0) {
        json_decref(out);
        return NULL;
    }
    for (;;) {
        const char *q =
            maxsplit >= 0 && (long long)json_array_size(out) >= maxsplit ? NULL : memmem(p, (size_t)(end - p), d, dl);
        if (!q) {
            json_array_append_new(out, json_stringn(p, (size_t)(end - p)));
            return out;
        }
        json_array_append_new(out, json_stringn(p, (size_t)(q - p)));
        p = q + dl;
    }
}

static json_t *replace(const json_t *s, const json_t *from, const json_t *to)
{
    const char *p = json_string_value(s), *end = p + json_string_length(s), *f = json_string_value(from);
    size_t fl = json_string_length(from);
    sd_buf b = {0};
    if (fl == 0) return json_incref((json_t *)s);
    for (const char *q; (q = memmem(p, (size_t)(end - p), f, fl)); p = q + fl) {
        sd_buf_add(&b, p, (size_t)(q - p));
        sd_buf_add(&b, json_string_value(to), json_string_length(to));
    }
    sd_buf_add(&b, p, (size_t)(end - p));
    size_t n = b.len;
    char *t = sd_buf_take(&b);
    json_t *r = t ? json_stringn(t, n) : NULL;
    free(t);
    return r;
}

/* upper / lower / title / capitalize (ASCII letters; others unchanged). */
static json_t *recase(const json_t *s, char how)
{
    size_t n = json_string_length(s);
    char *t = malloc(n + 1);
    if (!t) return NULL;
    memcpy(t, json_string_value(s), n + 1);
    bool start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        bool up = how == 'u' || ((how == 't' || how == 'c') && start);
        if (how == 'c' && i > 0) up = false;
        t[i] = (char)(up ? toupper(ch) : (how == 'l' || how == 't' || how == 'c') ? tolower(ch) : ch);
        start = !isalpha(ch);
    }
    json_t *r = json_stringn(t, n);
    free(t);
    return r;
}

/* ---------------------------------------------------------------- JSON as Python's json.dumps */

static void dump(const json_t *v, sd_buf *out, int indent, int level);

static void dump_string(const char *s, size_t len, sd_buf *out)
{
    sd_buf_adds(out, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        switch (ch) {
        case '"': sd_buf_adds(out, "\\\""); continue;
        case '\\': sd_buf_adds(out, "\\\\"); continue;
        case '\n': sd_buf_adds(out, "\\n"); continue;
        case '\r': sd_buf_adds(out, "\\r"); continue;
        case '\t': sd_buf_adds(out, "\\t"); continue;
        case '\b': sd_buf_adds(out, "\\b"); continue;
        case '\f': sd_buf_adds(out, "\\f"); continue;
        default: break;
        }
        if (ch < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", ch);
            sd_buf_adds(out, e);
        } else {
            sd_buf_add(out, &s[i], 1);
        }
    }
    sd_buf_adds(out, "\"");
}

static void newline(sd_buf *out, int indent, int level)
{
    if (indent < 0) return;
    sd_buf_adds(out, "\n");
    for (int i = 0; i < indent * level; i++) sd_buf_adds(out, " ");
}

/* json.dumps(v, ensure_ascii=False, indent=indent (-1: None)). */
static void dump(const json_t *v, sd_buf *out, int indent, int level)
{
    const char *sep = indent < 0 ? ", " : ",";
    if (json_is_string(v)) {
        dump_string(json_string_value(v), json_string_length(v), out);
    } else if (json_is_array(v)) {
        if (!json_array_size(v)) {
            sd_buf_adds(out, "[]");
            return;
        }
        sd_buf_adds(out, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sd_buf_adds(out, sep);
            newline(out, indent, level + 1);
            dump(json_array_get(v, i), out, indent, level + 1);
        }
        newline(out, indent, level);
        sd_buf_adds(out, "]");
    } else if (json_is_object(v)) {
        if (!json_object_size(v)) {
            sd_buf_adds(out, "{}");
            return;
        }
        const char *k;
        json_t *x;
        bool first = true;
        sd_buf_adds(out, "{");
        json_object_foreach((json_t *)v, k, x)
        {
            if (!first) sd_buf_adds(out, sep);
            first = false;
            newline(out, indent, level + 1);
            dump_string(k, strlen(k), out);
            sd_buf_adds(out, ": ");
            dump(x, out, indent, level + 1);
        }
        newline(out, indent, level);
        sd_buf_adds(out, "}");
    } else if (json_is_null(v) || !v) {
        sd_buf_adds(out, "null");
    } else if (json_is_boolean(v)) {
        sd_buf_adds(out, json_is_true(v) ? "true" : "false");
    } else {
        str_of(v, out, false);
    }
}

/* ---------------------------------------------------------------- nesting */

/* Values a template builds nest at most this deep: printing, tojson, comparing and freeing recurse
 * per level, and a value that contains itself (x.append([x])) would nest without end. */
#define J_MAX_VALUE_DEPTH 128

/* True when v nests at most limit levels deep (walks at most limit levels; a cycle fails). */
static bool depth_ok(const json_t *v, int limit)
{
    if (!json_is_array(v) && !json_is_object(v)) return true;
    if (limit <= 0) return false;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!depth_ok(json_array_get(v, i), limit - 1)) return false;
        return true;
    }
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) if (!depth_ok(x, limit - 1)) return false;
    return true;
}

/* True when target is reachable from v within limit levels. */
static bool reaches(const json_t *v, const json_t *target, int limit)
{
    if (v == target) return true;
    if (limit <= 0 || (!json_is_array(v) && !json_is_object(v))) return false;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (reaches(json_array_get(v, i), target, limit - 1)) return true;
        return false;
    }
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) if (reaches(x, target, limit - 1)) return true;
    return false;
}

/* Whether v may be stored inside container (a list append, a namespace attribute). */
static bool storable(ctx *c, const j_node *n, const json_t *container, const json_t *v)
{
    if (!depth_ok(v, J_MAX_VALUE_DEPTH - 1) || reaches(v, container, J_MAX_VALUE_DEPTH))
        return fail(c, n, "value nested too deeply (or containing itself)"), false;
    return true;
}

/* ---------------------------------------------------------------- scopes */

static json_t *lookup(ctx *c, const char *name)
{
    for (size_t i = c->n_scope; i-- > 0;) {
        json_t *v = json_object_get(c->scope[i], name);
        if (v) return json_incref(v);
    }
    return NULL;
}

static bool push_scope(ctx *c)
{
    json_t *o = json_object();
    if (!o || sd_grow(&c->scope, &c->cap_scope, c->n_scope + 1, sizeof *c->scope) != SD_OK) {
        json_decref(o);
        return false;
    }
    c->scope[c->n_scope++] = o;
    return true;
}

static void pop_scope(ctx *c) { json_decref(c->scope[--c->n_scope]); }

/* ---------------------------------------------------------------- subscripts */

static json_t *item(ctx *c, const j_node *n, json_t *obj, json_t *key)
{
    if (!obj) return fail(c, n, "cannot index an undefined value");
    if (json_is_object(obj))
        return json_is_string(key) ? json_incref(json_object_get(obj, json_string_value(key))) : NULL;
    if (!json_is_integer(key))
        return json_is_array(obj) || json_is_string(obj) ? fail(c, n, "indices must be integers") : NULL;
    long long i = json_integer_value(key);
    if (json_is_array(obj)) {
        long long len = (long long)json_array_size(obj);
        if (i < 0) i += len;
        return i >= 0 && i < len ? json_incref(json_array_get(obj, (size_t)i)) : NULL;
    }
    if (json_is_string(obj)) {
        const char *s = json_string_value(obj);
        size_t bl = json_string_length(obj);
        long long len = (long long)utf8_count(s, bl);
        if (i < 0) i += len;
        if (i < 0 || i >= len) return NULL;
        size_t a = utf8_offset(s, bl, (size_t)i), b = utf8_offset(s, bl, (size_t)i + 1);
        return json_stringn(s + a, b - a);
    }
    return NULL;
}

/* Python slice bounds for a sequence of len items. */
static void slice_bounds(long long len, const json_t *a, const json_t *b, long long step, long long *start,
                         long long *stop)
{
    long long lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
    *start = a && json_is_integer(a) ? json_integer_value(a) : (step > 0 ? 0 : len - 1);
    *stop = b && json_is_integer(b) ? json_integer_value(b) : (step > 0 ? len : -1 - len);
    if (a && json_is_integer(a) && *start < 0) *start += len;
    if (b && json_is_integer(b) && *stop < 0) *stop += len;
    if (*start < lo) *start = lo;
    if (*start > hi) *start = hi;
    if (*stop < lo) *stop = lo;
    if (*stop > hi) *stop = hi;
}

static json_t *slice(ctx *c, const j_node *n, json_t *obj, json_t *a, json_t *b, json_t *st)
{
    long long step = st && json_is_integer(st) ? json_integer_value(st) : 1;
    if (step == 0) return fail(c, n, "slice step cannot be zero");
    bool str = json_is_string(obj);
    if (!str && !json_is_array(obj)) return fail(c, n, "cannot slice this value");
    const char *s = str ? json_string_value(obj) : NULL;
    size_t bl = str ? json_string_length(obj) : 0;
    long long len = str ? (long long)utf8_count(s, bl) : (long long)json_array_size(obj), start, stop;
    slice_bounds(len, a, b, step, &start, &stop);
    json_t *out = str ? NULL : json_array();
    sd_buf sb = {0};
    for (long long i = start; step > 0 ? i < stop : i > stop;) {
        if (!str) {
            json_array_append(out, json_array_get(obj, (size_t)i));
            if (__builtin_add_overflow(i, step, &i)) break;
            continue;
        }
        size_t x = utf8_offset(s, bl, (size_t)i), y = utf8_offset(s, bl, (size_t)i + 1);
        sd_buf_add(&sb, s + x, y - x);
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (!str) return out;
    size_t sl = sb.len;
    char *t = sd_buf_take(&sb);
    json_t *r = t ? json_stringn(t, sl) : NULL;
    free(t);
    return r;
}

/* ---------------------------------------------------------------- operators */

static json_t *arith(ctx *c, const j_node *n, j_op op, json_t *a, json_t *b)
{
    if (!a || !b) return fail(c, n, "arithmetic on an undefined value");
    if (op == OP_ADD && json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        char *t = malloc(la + lb + 1);
        if (!t) return NULL;
        memcpy(t, json_string_value(a), la);
        memcpy(t + la, json_string_value(b), lb);
        json_t *r = json_stringn(t, la + lb);
        free(t);
        return r;
    }
    if (op == OP_ADD && json_is_array(a) && json_is_array(b)) {
        json_t *r = json_copy(a);
        json_array_extend(r, b);
        return r;
    }
    if (!is_num(a) || !is_num(b)) return fail(c, n, "unsupported operand types for an arithmetic operator");
    bool ints = json_is_integer(a) && json_is_integer(b);
    double x = num(a), y = num(b);
    long long i = ints ? json_integer_value(a) : 0, j = ints ? json_integer_value(b) : 0, k;
    switch (op) {
    case OP_ADD:
        if (!ints) return json_real(x + y);
        return __builtin_add_overflow(i, j, &k) ? fail(c, n, "integer overflow") : json_integer(k);
    case OP_SUB:
        if (!ints) return json_real(x - y);
        return __builtin_sub_overflow(i, j, &k) ? fail(c, n, "integer overflow") : json_integer(k);
    case OP_MUL:
        if (!ints) return json_real(x * y);
        return __builtin_mul_overflow(i, j, &k) ? fail(c, n, "integer overflow") : json_integer(k);
    case OP_DIV: return y == 0 ? fail(c, n, "division by zero") : json_real(x / y);
    case OP_FLOORDIV:
        if (y == 0) return fail(c, n, "division by zero");
        if (ints && i == LLONG_MIN && j == -1) return fail(c, n, "integer overflow"); /* and SIGFPE */
        if (ints) return json_integer(i / j - ((i % j != 0) && ((i < 0) != (j < 0))));
        return json_real(floor(x / y));
    case OP_MOD:
        if (y == 0) return fail(c, n, "modulo by zero");
        if (ints && j == -1) return json_integer(0); /* LLONG_MIN % -1 traps */
        if (ints) {
            long long m = i % j;
            return json_integer(m != 0 && ((m < 0) != (j < 0)) ? m + j : m);
        }
        {
            double m = fmod(x, y);
            return json_real(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
        }
    case OP_POW:
        if (ints && j >= 0 && fabs(pow(x, y)) >= 9.2e18) return fail(c, n, "integer overflow");
        return ints && j >= 0 ? json_integer((long long)llround(pow(x, y))) : json_real(pow(x, y));
    default: return fail(c, n, "bad operator");
    }
}

static bool contains(const json_t *hay, const json_t *needle)
{
    if (json_is_string(hay))
        return json_is_string(needle) && memmem(json_string_value(hay), json_string_length(hay),
                                                json_string_value(needle), json_string_length(needle)) != NULL;
    if (json_is_array(hay)) {
        for (size_t i = 0; i < json_array_size(hay); i++)
            if (eq(json_array_get(hay, i), needle)) return true;
        return false;
    }
    return json_is_object(hay) && json_is_string(needle) && json_object_get(hay, json_string_value(needle));
}

static json_t *binop(ctx *c, const j_node *n)
{
    json_t *a = eval(c, n->a), *b = c->failed ? NULL : eval(c, n->b), *r = NULL;
    if (c->failed) goto out;
    switch (n->op) {
    case OP_EQ: r = json_boolean(eq(a, b)); break;
    case OP_NE: r = json_boolean(!eq(a, b)); break;
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE: {
        int o = order(a, b);
        if (o == 2) {
            fail(c, n, "these values cannot be compared");
            break;
        }
        r = json_boolean(n->op == OP_LT ? o < 0 : n->op == OP_LE ? o <= 0 : n->op == OP_GT ? o > 0 : o >= 0);
        break;
    }
    case OP_IN:
    case OP_NOTIN:
        if (!b) {
            fail(c, n, "'in' needs a defined container");
            break;
        }
        r = json_boolean(contains(b, a) == (n->op == OP_IN));
        break;
    case OP_CONCAT: {
        sd_buf s = {0};
        str_of(a, &s, false);
        str_of(b, &s, false);
        size_t sl = s.len;
        char *t = sd_buf_take(&s);
        r = t ? json_stringn(t, sl) : NULL;
        free(t);
        break;
    }
    default: r = arith(c, n, n->op, a, b); break;
    }
out:
    json_decref(a);
    json_decref(b);
    return r;
}

/* ---------------------------------------------------------------- calls */

typedef struct {
    json_t *v[8]; /* positional arguments (evaluated) */
    size_t n;
    json_t *kv[8]; /* keyword argument values, by name in kn */
    const char *kn[8];
    size_t nk;
} args;

static void args_free(args *a)
{
    for (size_t i = 0; i < a->n; i++) json_decref(a->v[i]);
    for (size_t i = 0; i < a->nk; i++) json_decref(a->kv[i]);
}

static bool eval_args(ctx *c, const j_node *n, args *a)
{
    memset(a, 0, sizeof *a);
    if (n->args.n > 8 || n->kwargs.n > 8) return fail(c, n, "too many arguments"), false;
    for (size_t i = 0; i < n->args.n && !c->failed; i++) a->v[a->n++] = eval(c, n->args.v[i]);
    for (size_t i = 0; i < n->kwargs.n && !c->failed; i++) {
        a->kn[a->nk] = n->kw[i];
        a->kv[a->nk++] = eval(c, n->kwargs.v[i]);
    }
    return !c->failed;
}

/* Argument i, or the keyword name, or NULL. */
static json_t *arg(const args *a, size_t i, const char *name)
{
    if (i < a->n) return a->v[i];
    for (size_t k = 0; name && k < a->nk; k++)
        if (!strcmp(a->kn[k], name)) return a->kv[k];
    return NULL;
}

static const char *arg_str(const args *a, size_t i, const char *name)
{
    json_t *v = arg(a, i, name);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *string_method(ctx *c, const j_node *n, json_t *s, const char *m, const args *a)
{
    const char *p = json_string_value(s);
    size_t len = json_string_length(s);
    json_t *x = arg(a, 0, NULL);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (!json_is_string(x)) return fail(c, n, "%s() needs a string", m);
        size_t xl = json_string_length(x);
        bool start = m[0] == 's';
        return json_boolean(xl <= len && !memcmp(start ? p : p + len - xl, json_string_value(x), xl));
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip"))
        return strip(s, json_is_string(x) ? json_string_value(x) : NULL, m[0] != 'r', m[0] != 'l');
    if (!strcmp(m, "split")) {
        json_t *ms = arg(a, 1, "maxsplit");
        json_t *r = split(s, arg(a, 0, "sep"), json_is_integer(ms) ? json_integer_value(ms) : -1);
        return r ? r : fail(c, n, "empty separator");
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize"))
        return recase(s, m[0] == 'u' ? 'u' : m[0] == 'l' ? 'l' : m[0] == 't' ? 't' : 'c');
    if (!strcmp(m, "replace")) {
        json_t *y = arg(a, 1, NULL);
        if (!json_is_string(x) || !json_is_string(y)) return fail(c, n, "replace() needs two strings");
        return replace(s, x, y);
    }
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        if (!json_is_string(x)) return fail(c, n, "%s() needs a string", m);
        const char *q = p, *hit;
        long long count = 0;
        size_t xl = json_string_length(x);
        if (m[0] == 'f') {
            hit = memmem(p, len, json_string_value(x), xl);
            return json_integer(hit ? (long long)utf8_count(p, (size_t)(hit - p)) : -1);
        }
        while (xl && (hit = memmem(q, len - (size_t)(q - p), json_string_value(x), xl))) count++, q = hit + xl;
        return json_integer(count);
    }
    return fail(c, n, "strings have no method '%s'", m);
}

static json_t *pairs(json_t *o)
{
    json_t *r = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) json_array_append_new(r, json_pack("[sO]", k, v));
    return r;
}

static json_t *method(ctx *c, const j_node *n, json_t *obj, const char *m, const args *a)
{
    if (!obj) return fail(c, n, "cannot call '%s' on an undefined value", m);
    if (json_is_string(obj)) return string_method(c, n, obj, m, a);
    if (json_is_object(obj)) {
        if (!strcmp(m, "items")) return pairs(obj);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            json_t *r = json_array(), *v;
            const char *k;
            json_object_foreach(obj, k, v) json_array_append_new(r, m[0] == 'k' ? json_string(k) : json_incref(v));
            return r;
        }
        if (!strcmp(m, "get")) {
            const char *k = arg_str(a, 0, NULL);
            json_t *v = k ? json_object_get(obj, k) : NULL, *d = arg(a, 1, "default");
            return json_incref(v ? v : d ? d : json_null());
        }
    }
    if (json_is_array(obj)) {
        if (!strcmp(m, "append")) {
            json_t *x = arg(a, 0, NULL) ? arg(a, 0, NULL) : json_null();
            if (!storable(c, n, obj, x)) return NULL;
            json_array_append(obj, x);
            return json_null();
        }
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            long long count = 0;
            for (size_t i = 0; i < json_array_size(obj); i++)
                if (eq(json_array_get(obj, i), arg(a, 0, NULL))) {
                    if (m[0] == 'i') return json_integer((long long)i);
                    count++;
                }
            return m[0] == 'i' ? fail(c, n, "index(): value not in the list") : json_integer(count);
        }
    }
    return fail(c, n, "this value has no method '%s'", m);
}

static json_t *global_call(ctx *c, const j_node *n, const char *fn, const args *a)
{
    if (!strcmp(fn, "raise_exception")) {
        const char *msg = arg_str(a, 0, NULL);
        return fail(c, n, "%s", msg ? msg : "raise_exception()");
    }
    if (!strcmp(fn, "namespace") || !strcmp(fn, "dict")) {
        json_t *o = json_object();
        for (size_t i = 0; i < a->nk; i++) json_object_set(o, a->kn[i], a->kv[i] ? a->kv[i] : json_null());
        return o;
    }
    if (!strcmp(fn, "range")) {
        long long v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->n && i < 3; i++) {
            if (!json_is_integer(a->v[i])) return fail(c, n, "range() needs integers");
            v[i] = json_integer_value(a->v[i]);
        }
        long long start = a->n >= 2 ? v[0] : 0, stop = a->n >= 2 ? v[1] : v[0], step = a->n >= 3 ? v[2] : 1;
        if (step == 0) return fail(c, n, "range() step cannot be zero");
        json_t *r = json_array();
        for (long long i = start; (step > 0 ? i < stop : i > stop) && json_array_size(r) < 100000;) {
            json_array_append_new(r, json_integer(i));
            if (__builtin_add_overflow(i, step, &i)) break;
        }
        return r;
    }
    if (!strcmp(fn, "strftime_now")) {
        const char *f = arg_str(a, 0, NULL);
        char buf[256];
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        size_t k = f ? strftime(buf, sizeof buf, f, &tm) : 0;
        return json_stringn(buf, k);
    }
    return fail(c, n, "'%s' is undefined or not callable", fn);
}

static json_t *call(ctx *c, const j_node *n)
{
    args a;
    json_t *r = NULL;
    if (!eval_args(c, n, &a)) {
        args_free(&a);
        return NULL;
    }
    if (n->a->kind == J_ATTR) {
        json_t *obj = eval(c, n->a->a);
        if (!c->failed) r = method(c, n, obj, n->a->name, &a);
        json_decref(obj);
    } else if (n->a->kind == J_NAME) {
        r = global_call(c, n, n->a->name, &a);
    } else {
        fail(c, n, "this expression cannot be called");
    }
    args_free(&a);
    return r;
}

/* ---------------------------------------------------------------- filters and tests */

static json_t *filter(ctx *c, const j_node *n, json_t *v, const char *f, const args *a);

static json_t *test(ctx *c, const j_node *n, json_t *v, const char *t, const args *a)
{
    json_t *x = arg(a, 0, NULL);
    int r;
    if (!strcmp(t, "defined")) r = v != NULL;
    else if (!strcmp(t, "undefined")) r = v == NULL;
    else if (!strcmp(t, "none")) r = v && json_is_null(v);
    else if (!strcmp(t, "string")) r = v && json_is_string(v);
    else if (!strcmp(t, "number")) r = is_num(v);
    else if (!strcmp(t, "integer")) r = v && json_is_integer(v);
    else if (!strcmp(t, "float")) r = v && json_is_real(v);
    else if (!strcmp(t, "boolean")) r = v && json_is_boolean(v);
    else if (!strcmp(t, "true")) r = v && json_is_true(v);
    else if (!strcmp(t, "false")) r = v && json_is_false(v);
    else if (!strcmp(t, "mapping")) r = v && json_is_object(v);
    else if (!strcmp(t, "sequence") || !strcmp(t, "iterable"))
        r = v && (json_is_array(v) || json_is_string(v) || (t[0] == 'i' && json_is_object(v)));
    else if (!strcmp(t, "callable")) r = 0;
    else if (!strcmp(t, "odd") || !strcmp(t, "even"))
        r = v && json_is_integer(v) && (json_integer_value(v) % 2 != 0) == (t[0] == 'o');
    else if (!strcmp(t, "divisibleby"))
        r = v && json_is_integer(v) && json_is_integer(x) && json_integer_value(x) &&
            (json_integer_value(x) == -1 || json_integer_value(v) % json_integer_value(x) == 0);
    else if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "sameas")) r = eq(v, x);
    else if (!strcmp(t, "ne")) r = !eq(v, x);
    else if (!strcmp(t, "in")) r = x && contains(x, v);
    else if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        json_t *y = v && json_is_string(v) ? recase(v, t[0]) : NULL;
        r = y && json_equal(y, v);
        json_decref(y);
    } else return fail(c, n, "unknown test '%s'", t);
    return json_boolean(r);
}

/* Iterable items of v as an array (new ref): a list, a dict's keys, a
 * string's characters; undefined / none: empty. */
static json_t *items_of(ctx *c, const j_node *n, json_t *v)
{
    if (!v || json_is_null(v)) return json_array();
    if (json_is_array(v)) return json_incref(v);
    if (json_is_object(v)) {
        json_t *r = json_array();
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) json_array_append_new(r, json_string(k));
        return r;
    }
    if (json_is_string(v)) {
        json_t *r = json_array();
        const char *s = json_string_value(v);
        size_t bl = json_string_length(v), cnt = utf8_count(s, bl);
        for (size_t i = 0; i < cnt; i++) {
            size_t x = utf8_offset(s, bl, i), y = utf8_offset(s, bl, i + 1);
            json_array_append_new(r, json_stringn(s + x, y - x));
        }
        return r;
    }
    return fail(c, n, "this value is not iterable");
}

/* map / select / reject / selectattr / rejectattr over a list:
 *   map(attribute="x") | map("filter", args...)
 *   select("test", args...) | reject(...)      (no test: truthiness)
 *   selectattr("x", "test", args...) | rejectattr(...) */
static json_t *map_select(ctx *c, const j_node *n, json_t *v, const char *f, const args *a)
{
    json_t *list = items_of(c, n, v), *out = json_array();
    bool map = f[0] == 'm', by_attr = strstr(f, "attr") != NULL || (map && a->n == 0);
    const char *attr = by_attr ? arg_str(a, 0, "attribute") : NULL;
    size_t first = by_attr && !map ? 1 : 0; /* where the filter / test name is */
    const char *name = first < a->n && json_is_string(a->v[first]) ? json_string_value(a->v[first]) : NULL;
    args rest = {0};
    for (size_t i = first + 1; i < a->n; i++) rest.v[rest.n++] = a->v[i];
    for (size_t i = 0; list && i < json_array_size(list) && !c->failed; i++) {
        json_t *x = json_array_get(list, i);
        json_t *y = by_attr ? (attr && json_is_object(x) ? json_object_get(x, attr) : NULL) : x;
        if (map) {
            json_t *m = by_attr ? json_incref(y) : name ? filter(c, n, x, name, &rest) : NULL;
            json_array_append_new(out, m ? m : json_null());
            continue;
        }
        bool keep = truthy(y);
        if (name) {
            json_t *t = test(c, n, y, name, &rest);
            keep = truthy(t);
            json_decref(t);
        }
        if (keep == (f[0] == 's')) json_array_append(out, x);
    }
    json_decref(list);
    return out;
}

static json_t *tojson(const json_t *v, const args *a)
{
    json_t *ind = arg(a, 0, "indent");
    sd_buf b = {0};
    dump(v, &b, json_is_integer(ind) ? (int)json_integer_value(ind) : -1, 0);
    size_t sl = b.len;
    char *t = sd_buf_take(&b);
    json_t *r = t ? json_stringn(t, sl) : NULL;
    free(t);
    return r;
}

static json_t *seq_filter(ctx *c, const j_node *n, json_t *v, const char *f, const args *a)
{
    json_t *list = items_of(c, n, v), *r = NULL;
    if (!list) return NULL;
    size_t len = json_array_size(list);
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        r = len ? json_incref(json_array_get(list, f[0] == 'f' ? 0 : len - 1)) : NULL;
    } else if (!strcmp(f, "list")) {
        r = json_copy(list);
    } else if (!strcmp(f, "reverse")) {
        if (json_is_string(v)) {
            json_t *step = json_integer(-1);
            r = slice(c, n, v, NULL, NULL, step);
            json_decref(step);
        } else {
            r = json_array();
            for (size_t i = len; i-- > 0;) json_array_append(r, json_array_get(list, i));
        }
    } else { /* join */
        const char *sep = arg_str(a, 0, "d");
        sd_buf b = {0};
        for (size_t i = 0; i < len; i++) {
            if (i && sep) sd_buf_adds(&b, sep);
            str_of(json_array_get(list, i), &b, false);
        }
        size_t sl = b.len;
        char *t = sd_buf_take(&b);
        r = t ? json_stringn(t, sl) : NULL;
        free(t);
    }
    json_decref(list);
    return r;
}

static json_t *filter(ctx *c, const j_node *n, json_t *v, const char *f, const args *a)
{
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        json_t *d = arg(a, 0, "default_value");
        bool use = !v || (truthy(arg(a, 1, "boolean")) && !truthy(v));
        if (!use) return json_incref(v);
        return d ? json_incref(d) : json_string("");
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (!v) return json_integer(0);
        if (json_is_string(v)) return json_integer((long long)utf8_count(json_string_value(v), json_string_length(v)));
        if (json_is_array(v)) return json_integer((long long)json_array_size(v));
        if (json_is_object(v)) return json_integer((long long)json_object_size(v));
        return fail(c, n, "this value has no length");
    }
    if (!strcmp(f, "string")) return v ? to_string(v) : json_string("");
    if (!strcmp(f, "safe") || !strcmp(f, "e") || !strcmp(f, "escape")) return v ? json_incref(v) : json_string("");
    if (!strcmp(f, "tojson")) {
        json_t *ind = arg(a, 0, "indent");
        if (json_is_integer(ind) && (json_integer_value(ind) < 0 || json_integer_value(ind) > 64))
            return fail(c, n, "tojson: indent must be between 0 and 64");
        return tojson(v, a);
    }
    if (!strcmp(f, "items")) return v && json_is_object(v) ? pairs(v) : fail(c, n, "items needs a mapping");
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs")) {
        double x = is_num(v) ? num(v) : json_is_string(v) ? strtod(json_string_value(v), NULL) : 0;
        if (f[0] == 'a' && json_is_integer(v) && json_integer_value(v) == LLONG_MIN)
            return fail(c, n, "integer overflow");
        if (f[0] == 'a') return json_is_integer(v) ? json_integer(llabs(json_integer_value(v))) : json_real(fabs(x));
        if (f[0] == 'i' && json_is_integer(v)) return json_incref(v);
        if (f[0] == 'i' && !(x > -9.2e18 && x < 9.2e18)) return fail(c, n, "int: %g does not fit a 64-bit integer", x);
        return f[0] == 'i' ? json_integer((long long)x) : json_real(x);
    }
    if (!strcmp(f, "map") || !strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") ||
        !strcmp(f, "rejectattr"))
        return map_select(c, n, v, f, a);
    if (!strcmp(f, "first") || !strcmp(f, "last") || !strcmp(f, "list") || !strcmp(f, "reverse") || !strcmp(f, "join"))
        return seq_filter(c, n, v, f, a);
    json_t *s = !v ? json_string("") : json_is_string(v) ? json_incref(v) : to_string(v);
    json_t *r = NULL;
    if (!strcmp(f, "trim") || !strcmp(f, "strip")) r = strip(s, arg_str(a, 0, "chars"), true, true);
    else if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "title") || !strcmp(f, "capitalize"))
        r = recase(s, f[0] == 'u' ? 'u' : f[0] == 'l' ? 'l' : f[0] == 't' ? 't' : 'c');
    else if (!strcmp(f, "replace") && json_is_string(arg(a, 0, NULL)) && json_is_string(arg(a, 1, NULL)))
        r = replace(s, arg(a, 0, NULL), arg(a, 1, NULL));
    else fail(c, n, "unknown filter '%s'", f);
    json_decref(s);
    return r;
}

/* ---------------------------------------------------------------- expressions */

static json_t *eval_filter_or_test(ctx *c, const j_node *n)
{
    args a;
    json_t *v = eval(c, n->a), *r = NULL;
    if (!c->failed) {
        if (eval_args(c, n, &a)) {
            if (n->kind == J_FILTER) {
                r = filter(c, n, v, n->name, &a);
            } else {
                r = test(c, n, v, n->name, &a);
                if (r && n->negate) {
                    json_t *x = json_boolean(!json_is_true(r));
                    json_decref(r);
                    r = x;
                }
            }
        }
        args_free(&a); /* also the arguments evaluated before one failed */
    }
    json_decref(v);
    return r;
}

static json_t *eval_collection(ctx *c, const j_node *n)
{
    json_t *r = n->kind == J_LIST ? json_array() : json_object();
    for (size_t i = 0; i < n->args.n && !c->failed; i++) {
        json_t *k = eval(c, n->args.v[i]);
        if (n->kind == J_LIST) {
            json_array_append_new(r, k ? k : json_null());
            continue;
        }
        json_t *v = eval(c, n->kwargs.v[i]);
        if (!json_is_string(k)) fail(c, n, "dict keys must be strings here");
        else json_object_set(r, json_string_value(k), v ? v : json_null());
        json_decref(k);
        json_decref(v);
    }
    return r;
}

static json_t *eval(ctx *c, const j_node *n)
{
    if (c->failed || !n) return NULL;
    switch (n->kind) {
    case J_LIT: return json_incref(n->lit);
    case J_NAME: return lookup(c, n->name);
    case J_ATTR: {
        json_t *o = eval(c, n->a), *r = NULL;
        if (!o && !c->failed) fail(c, n, "'%s' of an undefined value", n->name);
        else if (json_is_object(o)) r = json_incref(json_object_get(o, n->name));
        json_decref(o);
        return r;
    }
    case J_ITEM:
    case J_SLICE: {
        json_t *o = eval(c, n->a), *b = eval(c, n->b), *x = eval(c, n->c), *y = eval(c, n->d), *r = NULL;
        if (!c->failed) r = n->kind == J_ITEM ? item(c, n, o, b) : slice(c, n, o, b, x, y);
        json_decref(o);
        json_decref(b);
        json_decref(x);
        json_decref(y);
        return r;
    }
    case J_CALL: return call(c, n);
    case J_FILTER:
    case J_TEST: return eval_filter_or_test(c, n);
    case J_NOT: {
        json_t *v = eval(c, n->a);
        bool t = truthy(v);
        json_decref(v);
        return c->failed ? NULL : json_boolean(!t);
    }
    case J_NEG: {
        json_t *v = eval(c, n->a), *z = json_integer(0), *r = c->failed ? NULL : arith(c, n, OP_SUB, z, v);
        json_decref(v);
        json_decref(z);
        return r;
    }
    case J_BIN: return binop(c, n);
    case J_AND:
    case J_OR: { /* Python: the operand that decides */
        json_t *a = eval(c, n->a);
        if (c->failed || truthy(a) == (n->kind == J_OR)) return a;
        json_decref(a);
        return eval(c, n->b);
    }
    case J_COND: {
        json_t *t = eval(c, n->a);
        bool yes = truthy(t);
        json_decref(t);
        return c->failed ? NULL : eval(c, yes ? n->b : n->c);
    }
    case J_LIST:
    case J_DICT: return eval_collection(c, n);
    default: return fail(c, n, "not an expression");
    }
}

/* ---------------------------------------------------------------- statements */

static void set_var(ctx *c, const char *name, json_t *v)
{
    json_object_set(c->scope[c->n_scope - 1], name, v ? v : json_null());
}

/* Binds the loop target(s) to x. */
static bool bind_target(ctx *c, const j_node *n, json_t *x)
{
    if (!n->name2) {
        set_var(c, n->name, x);
        return true;
    }
    if (!json_is_array(x) || json_array_size(x) != 2) return fail(c, n, "cannot unpack into two names"), false;
    set_var(c, n->name, json_array_get(x, 0));
    set_var(c, n->name2, json_array_get(x, 1));
    return true;
}

static json_t *loop_object(json_t *items, size_t i)
{
    size_t len = json_array_size(items);
    json_t *prev = i > 0 ? json_array_get(items, i - 1) : NULL,
           *next = i + 1 < len ? json_array_get(items, i + 1) : NULL;
    json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:b, s:b, s:I}", "index", (json_int_t)i + 1, "index0", (json_int_t)i,
                          "revindex", (json_int_t)(len - i), "revindex0", (json_int_t)(len - i - 1), "first", i == 0,
                          "last", i + 1 == len, "length", (json_int_t)len);
    if (o && prev) json_object_set(o, "previtem", prev);
    if (o && next) json_object_set(o, "nextitem", next);
    return o;
}

static bool render_for(ctx *c, const j_node *n, sd_buf *out)
{
    json_t *v = eval(c, n->a), *all = c->failed ? NULL : items_of(c, n, v), *items = json_array();
    json_decref(v);
    if (!all || !push_scope(c)) {
        json_decref(all);
        json_decref(items);
        return false;
    }
    for (size_t i = 0; i < json_array_size(all) && !c->failed;
         i++) { /* the `if` filter first: loop counts what passes */
        if (!n->b) {
            json_array_append(items, json_array_get(all, i));
            continue;
        }
        if (!bind_target(c, n, json_array_get(all, i))) break;
        json_t *t = eval(c, n->b);
        if (truthy(t)) json_array_append(items, json_array_get(all, i));
        json_decref(t);
    }
    for (size_t i = 0; i < json_array_size(items) && !c->failed; i++) {
        if (++c->iterations > J_MAX_ITERATIONS) {
            fail(c, n, "the template loops more than %lu times", J_MAX_ITERATIONS);
            break;
        }
        json_t *lp = loop_object(items, i);
        set_var(c, "loop", lp);
        json_decref(lp);
        if (bind_target(c, n, json_array_get(items, i))) render_list(c, &n->body, out);
    }
    pop_scope(c);
    if (!c->failed && json_array_size(items) == 0) render_list(c, &n->els, out);
    json_decref(all);
    json_decref(items);
    return !c->failed;
}

static bool render_node(ctx *c, const j_node *n, sd_buf *out)
{
    switch (n->kind) {
    case J_TEXT: sd_buf_add(out, n->text, n->len); return true;
    case J_OUT: {
        json_t *v = eval(c, n->a);
        str_of(v, out, false);
        json_decref(v);
        return !c->failed;
    }
    case J_IF: {
        json_t *v = eval(c, n->a);
        bool yes = truthy(v);
        json_decref(v);
        return !c->failed && render_list(c, yes ? &n->body : &n->els, out);
    }
    case J_FOR: return render_for(c, n, out);
    case J_SET: {
        json_t *v = eval(c, n->a);
        if (c->failed) return false;
        if (n->name2) {
            json_t *ns = lookup(c, n->name);
            if (!json_is_object(ns)) fail(c, n, "'%s' is not a namespace", n->name);
            else if (storable(c, n, ns, v ? v : json_null())) json_object_set(ns, n->name2, v ? v : json_null());
            json_decref(ns);
        } else if (depth_ok(v, J_MAX_VALUE_DEPTH)) {
            set_var(c, n->name, v);
        } else {
            fail(c, n, "value nested too deeply");
        }
        json_decref(v);
        return !c->failed;
    }
    case J_SETBLOCK: {
        sd_buf b = {0};
        if (!render_list(c, &n->body, &b)) {
            sd_buf_free(&b);
            return false;
        }
        size_t sl = b.len;
        char *t = sd_buf_take(&b);
        json_t *s = t ? json_stringn(t, sl) : NULL;
        free(t);
        set_var(c, n->name, s);
        json_decref(s);
        return true;
    }
    default: fail(c, n, "not a statement"); return false;
    }
}

static bool render_list(ctx *c, const j_list *l, sd_buf *out)
{
    for (size_t i = 0; i < l->n && !c->failed; i++) render_node(c, l->v[i], out);
    return !c->failed;
}

sd_status sd_jinja_render(const sd_jinja *t, json_t *vars, char **out, char *err, size_t errlen)
{
    *out = NULL;
    ctx c = {.err = err, .errlen = errlen};
    sd_buf b = {0};
    json_t *copy = json_is_object(vars) ? json_deep_copy(vars) : json_object(); /* the template may mutate */
    if (!copy || sd_grow(&c.scope, &c.cap_scope, 1, sizeof *c.scope) != SD_OK) {
        json_decref(copy);
        snprintf(err, errlen, "out of memory");
        return SD_ERR_NOMEM;
    }
    c.scope[c.n_scope++] = copy;
    bool ok = push_scope(&c) && render_list(&c, &t->root, &b);
    while (c.n_scope) pop_scope(&c);
    free(c.scope);
    if (!ok || b.failed) {
        if (!c.failed) snprintf(err, errlen, "out of memory");
        sd_buf_free(&b);
        return c.failed ? SD_ERR_ARG : SD_ERR_NOMEM;
    }
    *out = sd_buf_take(&b);
    return *out ? SD_OK : SD_ERR_NOMEM;
}
