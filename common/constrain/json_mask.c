/* json_mask.c — JSON output constraint (see json_mask.h).
 *
 * The automaton: a stack of open containers and a mode saying what may come
 * next. Whitespace may come between tokens (the "structural" modes); a
 * number ends at the first byte that cannot continue it, which is then read
 * again in the mode after the value. Strings check UTF-8 as they go (the
 * ranges of RFC 3629: no overlongs, no surrogates, nothing beyond U+10FFFF). */
#include "json_mask.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    JM_TOP,       /* before the value: it begins here (no whitespace before it) */
    JM_VALUE,     /* a value: after ':' or an array's ',' */
    JM_ARR_FIRST, /* after '[': a value or ']' */
    JM_OBJ_FIRST, /* after '{': a key or '}' */
    JM_OBJ_KEY,   /* after an object's ',': a key */
    JM_COLON,     /* after a key: ':' */
    JM_AFTER,     /* after a value in a container: ',' or the container's close */
    JM_STR,       /* in a string */
    JM_ESC,       /* after '\' */
    JM_UHEX,      /* in a \u escape's hex digits */
    JM_UTF,       /* in a multi-byte character */
    JM_MINUS,     /* a number: after '-' */
    JM_ZERO,      /* ... a leading 0 */
    JM_INT,       /* ... integer digits */
    JM_DOT,       /* ... after '.' */
    JM_FRAC,      /* ... fraction digits */
    JM_E,         /* ... after 'e' */
    JM_ESIGN,     /* ... after the exponent's sign */
    JM_EXP,       /* ... exponent digits */
    JM_LIT,       /* in true / false / null */
    JM_ENUM,      /* in an enum value: cand are the values its bytes match so far */
    JM_DONE,      /* the value is complete */
};

static const char *const LITS[3] = {"true", "false", "null"};

void sd_json_init_schema(sd_json_state *st, const sd_json_schema *schema)
{
    memset(st, 0, offsetof(sd_json_state, stack));
    st->schema = schema ? schema : sd_json_schema_object();
    st->mode = JM_TOP;
    st->vnode = SD_JS_NONE;
}

void sd_json_init(sd_json_state *st) { sd_json_init_schema(st, NULL); }

/* Whitespace bytes allowed in a row between tokens (none in a compact
 * schema's output). */
static int max_ws(const sd_json_state *st) { return st->schema->compact ? 0 : SD_JSON_MAX_WS; }

/* A branch of the state: the open containers only. */
static void copy_state(sd_json_state *d, const sd_json_state *s)
{
    memcpy(d, s, offsetof(sd_json_state, stack) + s->depth * sizeof(sd_json_frame));
}

static const sd_js_node *node_of(const sd_json_state *st, uint16_t id) { return &st->schema->nodes[id]; }

static const sd_js_item *item_of(const sd_json_state *st, const sd_js_node *nd, int i)
{
    return &st->schema->items[nd->items + (uint32_t)i];
}

static sd_json_frame *top(sd_json_state *st) { return &st->stack[st->depth - 1]; }

/* A value of the node may begin at the current depth and be finished. */
static bool fits(const sd_json_state *st, uint16_t id)
{
    return id != SD_JS_NONE && st->depth + node_of(st, id)->min_depth <= SD_JSON_MAX_DEPTH;
}

static bool is_ws(unsigned char c);

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool enum_complete(const sd_json_state *st)
{
    const sd_js_node *nd = node_of(st, st->vnode);
    for (int i = 0; i < nd->n; i++)
        if ((st->cand >> i & 1) && item_of(st, nd, i)->len == st->pos) return true;
    return false;
}

/* ---- numbers under bounds (minimum / maximum) ------------------------------------------- */

/* Bounds are whole numbers (json_schema.h), so a value's magnitude y = m +
 * f (m its integer part, f its fraction) lies within them by m alone,
 * except at an end: y > a needs f > 0 at m = a, y <= b needs f = 0 at m =
 * b. The automaton keeps m (saturating), the sign and whether the fraction
 * so far is all zeros; numbers under bounds are written without exponent. */
static bool num_bounded(const sd_json_state *st)
{
    const sd_js_node *nd = node_of(st, st->vnode);
    return (nd->kind == SD_JS_INTEGER || nd->kind == SD_JS_NUMBER) &&
           (nd->lo != INT64_MIN || nd->hi != INT64_MAX || nd->open);
}

/* The magnitudes of the node's values written with sign neg. */
typedef struct mags {
    uint64_t a, b;       /* from a to b */
    bool a_open, b_open; /* ... a / b themselves excluded */
} mags;

/* False when no value has that sign (INT64_MIN / INT64_MAX stand for no
 * bound: magnitudes stop at 2^63). */
static bool side(const sd_js_node *nd, bool neg, mags *r)
{
    bool lo_open = nd->open & SD_JS_LO_OPEN, hi_open = nd->open & SD_JS_HI_OPEN;
    if (!neg) {
        if (nd->hi < 0 || (nd->hi == 0 && hi_open)) return false;
        *r = (mags){nd->lo > 0 ? (uint64_t)nd->lo : 0, (uint64_t)nd->hi, nd->lo >= 0 && lo_open, hi_open};
    } else { /* -y within [lo, hi]: y within [-hi, -lo] (written so that INT64_MIN does not overflow) */
        if (nd->lo > 0 || (nd->lo == 0 && lo_open)) return false;
        *r = (mags){nd->hi < 0 ? (uint64_t)(-(nd->hi + 1)) + 1 : 0, (uint64_t)(-(nd->lo + 1)) + 1,
                    nd->hi <= 0 && hi_open, lo_open};
    }
    return r->a < r->b || (r->a == r->b && !r->a_open && !r->b_open);
}

/* The integer parts a value with sign neg may have: [*a, *b]. */
static bool int_parts(const sd_js_node *nd, bool neg, uint64_t *a, uint64_t *b)
{
    mags r;
    if (!side(nd, neg, &r)) return false;
    *a = r.a, *b = r.b_open ? r.b - 1 : r.b; /* an open a still has a + f, f > 0 (numbers; integers have no */
    return *a <= *b;                         /* open bounds: json_schema.c closes them) */
}

/* Whether a value with sign neg whose integer part so far is m can lie
 * within the bounds: its integer part m, or (more: digits may follow, m >
 * 0) after j more digits, in [m 10^j, (m + 1) 10^j - 1]. */
static bool part_reachable(const sd_js_node *nd, bool neg, uint64_t m, bool more)
{
    uint64_t a, b;
    if (!int_parts(nd, neg, &a, &b)) return false;
    if (m >= a && m <= b) return true;
    for (uint64_t lo = m, span = 1; more && m > 0 && lo <= b / 10;) {
        lo *= 10, span *= 10;                  /* span <= lo <= b: no overflow */
        if (lo + (span - 1) >= a) return true; /* lo <= b too */
    }
    return false;
}

/* The value read so far (integer part st->num, a fraction all zeros when
 * st->aux) may end here. */
static bool bounded_end(const sd_json_state *st)
{
    mags r;
    const sd_js_node *nd = node_of(st, st->vnode);
    if (st->mode == JM_MINUS || st->mode == JM_DOT || !part_reachable(nd, st->neg, st->num, false)) return false;
    side(nd, st->neg, &r);
    bool zero = st->mode != JM_FRAC || st->aux; /* f = 0 */
    return !(st->num == r.a && r.a_open && zero) && !(st->num == r.b && !r.b_open && !zero);
}

static bool step(sd_json_state *st, unsigned char c);
static bool number_end(sd_json_state *st, unsigned char c);

/* A number under bounds: digits of the integer part while it can lie
 * within them; '.' (numbers) when its integer part does; a fraction digit
 * other than 0 unless the integer part is the closed upper end; the end
 * only within them. */
static bool bounded_byte(sd_json_state *st, unsigned char c)
{
    const sd_js_node *nd = node_of(st, st->vnode);
    bool real = nd->kind == SD_JS_NUMBER;
    if (st->mode == JM_DOT || st->mode == JM_FRAC) {
        mags r;
        if (!is_digit(c)) return bounded_end(st) && number_end(st, c);
        side(nd, st->neg, &r);
        if (c != '0' && st->num == r.b && !r.b_open) return false;
        st->aux = st->aux && c == '0';
        return st->mode = JM_FRAC, true;
    }
    if (c == '.' && real && st->mode != JM_MINUS) {
        st->aux = 1; /* the fraction so far: all zeros */
        return part_reachable(nd, st->neg, st->num, false) ? (st->mode = JM_DOT, true) : false;
    }
    if (!is_digit(c)) return bounded_end(st) && number_end(st, c);
    if (st->mode == JM_ZERO) return false;
    uint64_t d = (uint64_t)(c - '0');
    if (st->mode == JM_MINUS) st->num = d;
    else st->num = st->num > (UINT64_MAX - 9) / 10 ? UINT64_MAX : st->num * 10 + d;
    st->mode = st->mode == JM_MINUS && d == 0 ? JM_ZERO : JM_INT;
    return part_reachable(nd, st->neg, st->num, st->mode == JM_INT);
}

/* A number read so far may end here (within its bounds). */
static bool number_may_end(const sd_json_state *st)
{
    int m = st->mode;
    if (m != JM_ZERO && m != JM_INT && m != JM_FRAC && m != JM_EXP) return false;
    return !num_bounded(st) || bounded_end(st);
}

/* A bounded number begins with c ('-' or a digit). */
static bool bounded_start(sd_json_state *st, const sd_js_node *nd, unsigned char c)
{
    uint64_t a, b;
    st->neg = c == '-', st->num = c == '-' ? 0 : (uint64_t)(c - '0'), st->aux = 1;
    if (c == '-') return int_parts(nd, true, &a, &b) && b > 0; /* some value below 0 ("-0" aside) */
    return part_reachable(nd, false, st->num, c != '0');
}

bool sd_json_complete(const sd_json_state *st)
{
    if (st->mode == JM_DONE) return true;
    if (st->depth > 0) return false;
    return number_may_end(st) || (st->mode == JM_ENUM && enum_complete(st));
}

static bool structural(int mode) { return mode <= JM_AFTER; }

/* ---- containers and keys --------------------------------------------------------------- */

static bool open_container(sd_json_state *st, uint8_t kind, uint16_t node)
{
    if (st->depth == SD_JSON_MAX_DEPTH) return false;
    st->stack[st->depth++] = (sd_json_frame){.node = node, .prop = SD_JS_NONE, .kind = kind};
    st->mode = kind == 0 ? JM_OBJ_FIRST : JM_ARR_FIRST;
    return true;
}

static const sd_js_item *item_of(const sd_json_state *st, const sd_js_node *nd, int i);
static sd_json_frame *top(sd_json_state *st);

/* A union's discriminator value was read: the object goes on as the
 * alternative the value names, the discriminator written. */
static void union_pick(sd_json_state *st)
{
    const sd_js_node *e = node_of(st, st->vnode), *u = node_of(st, top(st)->node);
    const sd_js_item *name = item_of(st, u, 0);
    for (int i = 0; i < e->n; i++) {
        const sd_js_item *v = item_of(st, e, i);
        if (!(st->cand >> i & 1) || v->len != st->pos) continue;
        const sd_js_node *a = node_of(st, v->node);
        for (int q = 0; q < a->n; q++) {
            const sd_js_item *p = item_of(st, a, q);
            if (p->len == name->len && !memcmp(st->schema->text + p->text, st->schema->text + name->text, p->len)) {
                top(st)->node = v->node;
                top(st)->seen = 1ull << q;
            }
        }
        return;
    }
}

static void value_end(sd_json_state *st)
{
    if (st->mode == JM_ENUM && st->depth > 0 && node_of(st, top(st)->node)->kind == SD_JS_UNION) union_pick(st);
    st->mode = st->depth == 0 ? JM_DONE : JM_AFTER;
}

static bool close_container(sd_json_state *st, uint8_t kind)
{
    if (st->depth == 0 || top(st)->kind != kind) return false;
    const sd_json_frame *f = top(st);
    const sd_js_node *nd = node_of(st, f->node);
    if (kind == 0 && (nd->kind == SD_JS_OBJECT || nd->kind == SD_JS_UNION) && (nd->required & ~f->seen)) return false;
    if (kind == 1 && nd->kind == SD_JS_ARRAY && f->count < nd->min) return false;
    st->depth--;
    value_end(st);
    return true;
}

/* The open object has declared properties (its keys are matched). */
static bool keyed(const sd_json_state *st)
{
    const sd_js_node *nd = node_of(st, st->stack[st->depth - 1].node);
    return (nd->kind == SD_JS_OBJECT || nd->kind == SD_JS_UNION) && nd->n > 0;
}

/* The declared properties not yet written whose values fit. */
static uint64_t open_props(sd_json_state *st)
{
    const sd_js_node *nd = node_of(st, top(st)->node);
    uint64_t m = 0;
    for (int i = 0; i < nd->n; i++)
        if (!(top(st)->seen >> i & 1) && fits(st, item_of(st, nd, i)->node)) m |= 1ull << i;
    return m;
}

/* Undeclared keys may come (additionalProperties, or any object). */
static bool extra_ok(sd_json_state *st)
{
    const sd_js_node *nd = node_of(st, top(st)->node);
    return nd->kind == SD_JS_ANY || fits(st, nd->child);
}

/* '"' begins a key. */
static bool key_start(sd_json_state *st)
{
    bool extra = extra_ok(st);
    uint64_t open = keyed(st) ? open_props(st) : 0;
    if (!extra && !open) return false;
    int n = node_of(st, top(st)->node)->n;
    st->cand = extra ? (n == 64 ? ~0ull : (1ull << n) - 1) : open;
    st->pos = 0;
    st->mode = JM_STR, st->key = 1, st->vnode = SD_JS_NONE;
    return true;
}

/* A byte of a key of declared properties (not its closing quote). */
static bool key_byte(sd_json_state *st, unsigned char c)
{
    const sd_js_node *nd = node_of(st, top(st)->node);
    bool extra = extra_ok(st);
    if (extra && st->mode == JM_ESC && (c == 'u' || c == '/')) return false; /* equal names: equal texts */
    uint64_t next = 0;
    for (int i = 0; i < nd->n; i++) {
        const sd_js_item *it = item_of(st, nd, i);
        if ((st->cand >> i & 1) && st->pos < it->len && (unsigned char)st->schema->text[it->text + st->pos] == c)
            next |= 1ull << i;
    }
    if (!next && !extra) return false;
    st->cand = next;
    if (st->pos < UINT16_MAX) st->pos++;
    return true;
}

/* The key's closing quote: which property's value follows. */
static bool key_end(sd_json_state *st)
{
    sd_json_frame *f = top(st);
    const sd_js_node *nd = node_of(st, f->node);
    if (nd->kind == SD_JS_ANY) f->prop = f->node;
    else if (!keyed(st)) f->prop = nd->child;
    else {
        int hit = -1;
        for (int i = 0; i < nd->n && hit < 0; i++)
            if ((st->cand >> i & 1) && item_of(st, nd, i)->len == st->pos) hit = i;
        if (hit >= 0 && ((f->seen >> hit & 1) || !fits(st, item_of(st, nd, hit)->node))) return false;
        if (hit < 0 && !extra_ok(st)) return false;
        f->prop = hit >= 0 ? item_of(st, nd, hit)->node : nd->child;
        if (hit >= 0) f->seen |= 1ull << hit;
    }
    st->key = 0;
    st->mode = JM_COLON;
    return true;
}

/* ---- values ------------------------------------------------------------------------------ */

/* The node the value beginning here must be. */
static uint16_t expected(sd_json_state *st)
{
    if (st->depth == 0) return st->schema->root;
    const sd_json_frame *f = top(st);
    if (f->kind == 0) return f->prop;
    return node_of(st, f->node)->kind == SD_JS_ANY ? f->node : node_of(st, f->node)->child;
}

static bool enum_start(sd_json_state *st, unsigned char c)
{
    const sd_js_node *nd = node_of(st, st->vnode);
    st->cand = 0;
    for (int i = 0; i < nd->n; i++) {
        const sd_js_item *it = item_of(st, nd, i);
        /* a union's value: only alternatives that fit around the object already open */
        if (it->node != SD_JS_NONE && st->depth - 1 + node_of(st, it->node)->min_depth > SD_JSON_MAX_DEPTH) continue;
        if ((unsigned char)st->schema->text[it->text] == c) st->cand |= 1ull << i;
    }
    st->pos = 1;
    st->mode = JM_ENUM;
    return st->cand != 0;
}

/* c begins a value. */
static bool value_start(sd_json_state *st, unsigned char c)
{
    uint16_t node = expected(st);
    if (node != SD_JS_NONE && node_of(st, node)->kind == SD_JS_ANYOF)
        node = st->schema->picks[node_of(st, node)->pick + c];
    if (!fits(st, node) || !sd_json_schema_starts(st->schema, node, c)) return false;
    if (st->depth > 0 && top(st)->kind == 1 && top(st)->count < UINT16_MAX) top(st)->count++;
    st->vnode = node;
    if (node_of(st, node)->kind == SD_JS_ENUM) return enum_start(st, c);
    switch (c) {
    case '{': return open_container(st, 0, node);
    case '[': return open_container(st, 1, node);
    case '"': st->mode = JM_STR, st->key = 0, st->len = 0; return true;
    case '-': st->mode = JM_MINUS; return !num_bounded(st) || bounded_start(st, node_of(st, node), c);
    case '0': st->mode = JM_ZERO; return !num_bounded(st) || bounded_start(st, node_of(st, node), c);
    case 't':
    case 'f':
    case 'n': st->mode = JM_LIT, st->aux = c == 't' ? 0 : c == 'f' ? 1 : 2, st->left = 1; return true;
    default: st->mode = JM_INT; return !num_bounded(st) || bounded_start(st, node_of(st, node), c); /* 1-9 */
    }
}

/* A UTF-8 lead byte in a string: the continuation bytes it needs and the
 * first one's range (RFC 3629, as tk_utf8_need). */
static bool utf8_lead(sd_json_state *st, unsigned char c)
{
    st->lo = 0x80, st->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) st->left = 1;
    else if (c >= 0xE0 && c <= 0xEF) st->left = 2, st->lo = c == 0xE0 ? 0xA0 : 0x80, st->hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) st->left = 3, st->lo = c == 0xF0 ? 0x90 : 0x80, st->hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    st->mode = JM_UTF;
    return true;
}

/* The string value's node when it bounds the length (else NULL). */
static const sd_js_node *bounded(const sd_json_state *st)
{
    if (st->key || st->vnode == SD_JS_NONE) return NULL;
    const sd_js_node *nd = node_of(st, st->vnode);
    return nd->kind == SD_JS_STRING && (nd->min > 0 || nd->max != SD_JS_UNBOUNDED) ? nd : NULL;
}

static bool string_end(sd_json_state *st)
{
    const sd_js_node *b = bounded(st);
    if (b && st->len < b->min) return false;
    if (st->key) return key_end(st);
    value_end(st);
    return true;
}

static bool string_byte(sd_json_state *st, unsigned char c)
{
    if (st->key && !(st->mode == JM_STR && c == '"') && keyed(st) && !key_byte(st, c)) return false;
    switch (st->mode) {
    case JM_STR: {
        if (c == '"') return string_end(st);
        if (c < 0x20 || (c >= 0x80 && c < 0xC2) || c > 0xF4) return false;
        const sd_js_node *b = bounded(st);
        if (b && st->len >= b->max) return false;
        st->len++;
        if (c == '\\') return st->mode = JM_ESC, true;
        return c < 0x80 ? true : utf8_lead(st, c);
    }
    case JM_ESC:
        if (c == 'u') return st->mode = JM_UHEX, st->left = 4, true;
        if (!strchr("\"\\/bfnrt", c) || c == 0) return false;
        st->mode = JM_STR;
        return true;
    case JM_UHEX:
        if (!is_hex(c)) return false;
        if (st->left == 4) st->aux = c;
        /* no surrogate escapes: \uD800 .. \uDFFF (second digit 8-9 or a-f after d) */
        if (st->left == 3 && (st->aux == 'd' || st->aux == 'D') && (c == '8' || c == '9' || !is_digit(c))) return false;
        if (--st->left == 0) st->mode = JM_STR;
        return true;
    default: /* JM_UTF */
        if (c < st->lo || c > st->hi) return false;
        st->lo = 0x80, st->hi = 0xBF;
        if (--st->left == 0) st->mode = JM_STR;
        return true;
    }
}

static bool step(sd_json_state *st, unsigned char c);

/* The number (or enum value) ends before c: c is read again after it. */
static bool number_end(sd_json_state *st, unsigned char c)
{
    value_end(st);
    return st->mode != JM_DONE && step(st, c);
}

static bool number_byte(sd_json_state *st, unsigned char c)
{
    if (num_bounded(st)) return bounded_byte(st, c);
    bool real = node_of(st, st->vnode)->kind != SD_JS_INTEGER;
    bool e = real && (c == 'e' || c == 'E'), dot = real && c == '.';
    switch (st->mode) {
    case JM_MINUS:
        if (c == '0') return st->mode = JM_ZERO, true;
        return is_digit(c) ? (st->mode = JM_INT, true) : false;
    case JM_ZERO:
        if (dot) return st->mode = JM_DOT, true;
        return e ? (st->mode = JM_E, true) : number_end(st, c);
    case JM_INT:
        if (is_digit(c)) return true;
        if (dot) return st->mode = JM_DOT, true;
        return e ? (st->mode = JM_E, true) : number_end(st, c);
    case JM_DOT: return is_digit(c) ? (st->mode = JM_FRAC, true) : false;
    case JM_FRAC:
        if (is_digit(c)) return true;
        return e ? (st->mode = JM_E, true) : number_end(st, c);
    case JM_E:
        if (c == '+' || c == '-') return st->mode = JM_ESIGN, true;
        return is_digit(c) ? (st->mode = JM_EXP, true) : false;
    case JM_ESIGN: return is_digit(c) ? (st->mode = JM_EXP, true) : false;
    default: /* JM_EXP */ return is_digit(c) ? true : number_end(st, c);
    }
}

static bool enum_byte(sd_json_state *st, unsigned char c)
{
    const sd_js_node *nd = node_of(st, st->vnode);
    uint64_t next = 0;
    bool done = false;
    for (int i = 0; i < nd->n; i++) {
        if (!(st->cand >> i & 1)) continue;
        const sd_js_item *it = item_of(st, nd, i);
        if (it->len == st->pos) done = true;
        else if ((unsigned char)st->schema->text[it->text + st->pos] == c) next |= 1ull << i;
    }
    if (next) {
        st->cand = next;
        st->pos++;
        return true;
    }
    return done && number_end(st, c);
}

/* After a value in a container: ',' when another member may come. */
static bool comma(sd_json_state *st)
{
    sd_json_frame *f = top(st);
    if (f->kind == 0) {
        if (!extra_ok(st) && !(keyed(st) && open_props(st))) return false;
        st->mode = JM_OBJ_KEY;
        return true;
    }
    const sd_js_node *nd = node_of(st, f->node);
    if (nd->kind == SD_JS_ARRAY && f->count >= nd->max) return false;
    st->mode = JM_VALUE;
    return true;
}

/* The structural modes: between tokens. */
static bool structural_byte(sd_json_state *st, unsigned char c)
{
    if (is_ws(c)) return st->mode != JM_TOP && ++st->ws <= max_ws(st);
    st->ws = 0;
    switch (st->mode) {
    case JM_TOP:
    case JM_VALUE: return value_start(st, c);
    case JM_ARR_FIRST: {
        if (c == ']') return close_container(st, 1);
        const sd_js_node *nd = node_of(st, top(st)->node);
        return (nd->kind != SD_JS_ARRAY || nd->max > 0) && value_start(st, c);
    }
    case JM_OBJ_FIRST:
        if (c == '}') return close_container(st, 0);
        /* fall through */
    case JM_OBJ_KEY: return c == '"' && key_start(st);
    case JM_COLON: return c == ':' ? (st->mode = JM_VALUE, true) : false;
    default: /* JM_AFTER */
        if (c == ',') return comma(st);
        if (c == '}') return close_container(st, 0);
        return c == ']' && close_container(st, 1);
    }
}

static bool step(sd_json_state *st, unsigned char c)
{
    int m = st->mode;
    if (structural(m)) return structural_byte(st, c);
    if (m >= JM_STR && m <= JM_UTF) return string_byte(st, c);
    if (m >= JM_MINUS && m <= JM_EXP) return number_byte(st, c);
    if (m == JM_LIT) {
        const char *lit = LITS[st->aux];
        if ((unsigned char)lit[st->left] != c) return false;
        if (lit[++st->left] == 0) value_end(st);
        return true;
    }
    if (m == JM_ENUM) return enum_byte(st, c);
    return false; /* JM_DONE: nothing after the value */
}

bool sd_json_feed(sd_json_state *st, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!step(st, (unsigned char)p[i])) return false;
    return true;
}

int sd_json_next(const sd_json_state *st, unsigned char next[256])
{
    int k = 0;
    for (int c = 0; c < 256; c++) {
        sd_json_state b;
        copy_state(&b, st);
        if (step(&b, (unsigned char)c)) next[k++] = (unsigned char)c;
    }
    return k;
}

/* ---- the token table and the mask ------------------------------------------------- */

enum { TOK_TEXT = SD_JSON_TOKEN_TEXT, TOK_EOS = SD_JSON_TOKEN_EOS, TOK_NEVER = SD_JSON_TOKEN_NEVER };

struct sd_json_vocab {
    int n;           /* ids with an entry (the model's vocab) */
    char *bytes;     /* every id's bytes */
    uint32_t *off;   /* [n + 1] */
    uint8_t *kind;   /* [n] TOK_* */
    uint8_t *lead;   /* [n] leading whitespace bytes (255: 255 or more) */
    int16_t *body;   /* [n] the first byte after them, -1 when the token is all whitespace */
    uint8_t *plain;  /* [n] string content: whole UTF-8 characters, no '"', '\\' or control byte */
    uint16_t *chars; /* [n] plain tokens: their characters (stops at 65535) */
    /* the sparse paths of the mask (sd_json_mask): text tokens grouped by body (by_body[body_off[b] ..
     * body_off[b + 1]), b 256 for all-whitespace tokens), the text tokens that are not plain, the others (EOS,
     * never) */
    uint32_t *by_body, body_off[258];
    uint32_t *by_first, first_off[257]; /* text tokens by their first byte (sd_json_vocab_first) */
    uint32_t *nonplain, n_nonplain;
    uint32_t *others, n_others;
    uint32_t *plain_long, n_plain; /* the plain text tokens, most characters first */
};

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The shortcuts' table: what a token starts with, and whether it is plain
 * string content (whole characters: a string stays open, in the same mode). */
static void classify(sd_json_vocab *v, int t)
{
    const unsigned char *p = (const unsigned char *)v->bytes + v->off[t];
    size_t n = v->off[t + 1] - v->off[t], i = 0;
    while (i < n && is_ws(p[i])) i++;
    v->lead[t] = i > 255 ? 255 : (uint8_t)i;
    v->body[t] = i < n ? p[i] : -1;
    sd_json_state st;
    sd_json_init(&st);
    st.mode = JM_STR, st.vnode = 0; /* a string value of any JSON (json_object's node 0) */
    bool plain = n > 0;
    for (i = 0; i < n && plain; i++) plain = p[i] != '"' && p[i] != '\\' && step(&st, p[i]);
    v->plain[t] = plain && st.mode == JM_STR;
    v->chars[t] = st.len > UINT16_MAX ? UINT16_MAX : (uint16_t)st.len;
}

/* plain_long: most characters first (a counting sort: a token has at most
 * 65535). */
static void sort_by_chars(sd_json_vocab *v)
{
    uint16_t top = 0;
    for (uint32_t i = 0; i < v->n_plain; i++) top = v->chars[v->plain_long[i]] > top ? v->chars[v->plain_long[i]] : top;
    uint32_t *count = calloc((size_t)top + 2, sizeof *count), *out = malloc((v->n_plain + 1) * sizeof *out);
    if (count && out) {
        for (uint32_t i = 0; i < v->n_plain; i++) count[top - v->chars[v->plain_long[i]] + 1]++;
        for (uint32_t c = 1; c <= (uint32_t)top + 1; c++) count[c] += count[c - 1];
        for (uint32_t i = 0; i < v->n_plain; i++) out[count[top - v->chars[v->plain_long[i]]]++] = v->plain_long[i];
        memcpy(v->plain_long, out, v->n_plain * sizeof *out);
    }
    free(count);
    free(out);
}

/* The lists of the mask's sparse paths (sd_json_vocab). */
static bool index_tokens(sd_json_vocab *v)
{
    uint32_t count[257] = {0}, n_text = 0;
    for (int t = 0; t < v->n; t++) {
        if (v->kind[t] != TOK_TEXT) {
            v->n_others++;
            continue;
        }
        count[v->body[t] < 0 ? 256 : v->body[t]]++;
        n_text++;
        v->n_nonplain += !v->plain[t];
    }
    v->by_body = malloc((n_text ? n_text : 1) * sizeof *v->by_body);
    v->by_first = malloc((n_text ? n_text : 1) * sizeof *v->by_first);
    v->nonplain = malloc((v->n_nonplain ? v->n_nonplain : 1) * sizeof *v->nonplain);
    v->others = malloc((v->n_others ? v->n_others : 1) * sizeof *v->others);
    v->n_plain = n_text - v->n_nonplain;
    v->plain_long = malloc((v->n_plain ? v->n_plain : 1) * sizeof *v->plain_long);
    if (!v->by_body || !v->by_first || !v->nonplain || !v->others || !v->plain_long) return false;
    uint32_t firsts[256] = {0};
    for (int t = 0; t < v->n; t++)
        if (v->kind[t] == TOK_TEXT) firsts[(unsigned char)v->bytes[v->off[t]]]++;
    v->first_off[0] = 0;
    for (int b = 0; b < 256; b++) v->first_off[b + 1] = v->first_off[b] + firsts[b];
    memcpy(firsts, v->first_off, sizeof firsts);
    for (int t = 0; t < v->n; t++)
        if (v->kind[t] == TOK_TEXT) v->by_first[firsts[(unsigned char)v->bytes[v->off[t]]]++] = (uint32_t)t;
    v->body_off[0] = 0;
    for (int b = 0; b < 257; b++) v->body_off[b + 1] = v->body_off[b] + count[b];
    uint32_t at[257], np = 0, no = 0, nl = 0;
    memcpy(at, v->body_off, sizeof at);
    for (int t = 0; t < v->n; t++) {
        if (v->kind[t] != TOK_TEXT) {
            v->others[no++] = (uint32_t)t;
            continue;
        }
        v->by_body[at[v->body[t] < 0 ? 256 : v->body[t]]++] = (uint32_t)t;
        if (!v->plain[t]) v->nonplain[np++] = (uint32_t)t;
        else v->plain_long[nl++] = (uint32_t)t;
    }
    sort_by_chars(v);
    return true;
}

sd_status sd_json_vocab_new(const sd_tok *tok, int vocab, const int *eos, int n_eos, sd_json_vocab **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    if (!tok || vocab <= 0 || n_eos < 0 || (n_eos > 0 && !eos))
        return sd_seterr(err, errlen, SD_ERR_ARG, "JSON output: no tokenizer, or a vocabulary of %d with %d EOS ids",
                         vocab, n_eos);
    sd_json_vocab *v = calloc(1, sizeof *v);
    char *data = NULL;
    uint32_t *off = NULL;
    if (!v) return sd_seterr(err, errlen, SD_ERR_NOMEM, "JSON output: out of memory");
    sd_status st = sd_tok_vocab_bytes(tok, &data, &off, err, errlen);
    if (st != SD_OK) {
        free(v);
        return st;
    }
    int nt = sd_tok_vocab_size(tok);
    v->n = vocab;
    v->bytes = data;
    v->off = calloc((size_t)vocab + 1, sizeof *v->off);
    v->kind = malloc((size_t)vocab);
    v->lead = malloc((size_t)vocab);
    v->body = malloc((size_t)vocab * sizeof *v->body);
    v->plain = malloc((size_t)vocab);
    v->chars = malloc((size_t)vocab * sizeof *v->chars);
    if (!v->off || !v->kind || !v->lead || !v->body || !v->plain || !v->chars) {
        free(off);
        sd_json_vocab_free(v);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "JSON output: out of memory");
    }
    for (int t = 0; t < vocab; t++) {
        bool known = t < nt;
        v->off[t] = known ? off[t] : off[nt];
        v->kind[t] = !known || sd_tok_is_special(tok, t) || off[t + 1] == off[t] ? TOK_NEVER : TOK_TEXT;
    }
    v->off[vocab] = vocab < nt ? off[vocab] : off[nt];
    for (int i = 0; i < n_eos; i++)
        if (eos[i] >= 0 && eos[i] < vocab) v->kind[eos[i]] = TOK_EOS;
    for (int t = 0; t < vocab; t++) classify(v, t);
    free(off);
    if (!index_tokens(v)) {
        sd_json_vocab_free(v);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "JSON output: out of memory");
    }
    *out = v;
    return SD_OK;
}

sd_status sd_json_vocab_load(const char *model_dir, const sd_model_config *c, sd_json_vocab **out, char *err,
                             size_t errlen)
{
    char path[4096];
    sd_tok *tok = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    sd_status st = sd_tok_load(path, &tok, err, errlen);
    if (st != SD_OK) return st;
    st = sd_json_vocab_new(tok, c->vocab_size, c->eos_token_ids, c->n_eos, out, err, errlen);
    sd_tok_free(tok);
    return st;
}

void sd_json_vocab_free(sd_json_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->kind);
    free(v->lead);
    free(v->body);
    free(v->plain);
    free(v->chars);
    free(v->by_body);
    free(v->by_first);
    free(v->nonplain);
    free(v->others);
    free(v->plain_long);
    free(v);
}

const uint32_t *sd_json_vocab_first(const sd_json_vocab *v, int b, size_t *n)
{
    if (b < 0 || b > 256) return *n = 0, NULL;
    if (b == 256) return *n = v->n_others, v->others;
    *n = v->first_off[b + 1] - v->first_off[b];
    return v->by_first + v->first_off[b];
}

int sd_json_vocab_token(const sd_json_vocab *v, int32_t t, const char **p, size_t *n)
{
    if (!v || t < 0 || t >= v->n) return SD_JSON_TOKEN_NEVER;
    *p = v->bytes + v->off[t];
    *n = v->off[t + 1] - v->off[t];
    return v->kind[t];
}

/* The state after the output; false when the automaton refuses it. */
static bool state_after(const sd_json_vocab *v, const sd_json_schema *schema, const int32_t *output, size_t n,
                        sd_json_state *st)
{
    sd_json_init_schema(st, schema);
    for (size_t i = 0; i < n; i++) {
        int32_t t = output[i];
        if (t < 0 || t >= v->n || v->kind[t] != TOK_TEXT) continue;
        if (!sd_json_feed(st, v->bytes + v->off[t], v->off[t + 1] - v->off[t])) return false;
    }
    return true;
}

/* A row's state and what may come first in it. */
typedef struct row_state {
    sd_json_state st;
    bool first[256]; /* byte c may come first */
} row_state;

static void row_state_set(row_state *r, const sd_json_state *st, bool ok)
{
    copy_state(&r->st, st);
    memset(r->first, 0, sizeof r->first);
    unsigned char next[256];
    for (int i = 0, k = ok ? sd_json_next(st, next) : 0; i < k; i++) r->first[next[i]] = true;
}

/* Whether text token t (not EOS, not special) may come in state r.
 * Shortcuts before running the automaton: in the structural modes a token's
 * leading whitespace only counts (the mode stays) and its first other byte
 * must pass first[]; in a string, plain content keeps it open. */
static bool token_ok(const sd_json_vocab *v, const row_state *r, int t)
{
    const sd_json_state *st = &r->st;
    if (structural(st->mode)) {
        int lead = v->lead[t];
        if (lead > 0 && (st->mode == JM_TOP || st->ws + lead > max_ws(st))) return false;
        if (v->body[t] < 0) return true; /* all whitespace, within the bound */
        if (!r->first[v->body[t]]) return false;
    } else if (st->mode == JM_STR && v->plain[t] && !(st->key && keyed(st))) {
        const sd_js_node *b = bounded(st);
        return !b || st->len + v->chars[t] <= b->max;
    } else if (!r->first[(unsigned char)v->bytes[v->off[t]]]) {
        return false;
    }
    sd_json_state b;
    copy_state(&b, st);
    return sd_json_feed(&b, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
}

/* Inside a string not a key matched against declared names: plain
 * content passes (within a length bound: the plain tokens with more
 * characters than are left are refused, the longest first); only the tokens
 * that are not plain content are checked, the others (EOS, never) refused. */
static bool string_path(const sd_json_state *st) { return st->mode == JM_STR && !(st->key && keyed(st)); }

static void mask_string(const sd_json_vocab *v, const row_state *r, float *logits, int nv)
{
    const sd_js_node *b = bounded(&r->st);
    uint64_t room = b ? (uint64_t)b->max - r->st.len : UINT64_MAX; /* len <= max within a string */
    for (uint32_t i = 0; b && i < v->n_plain && v->chars[v->plain_long[i]] > room; i++)
        if ((int)v->plain_long[i] < nv) logits[v->plain_long[i]] = -INFINITY;
    for (uint32_t i = 0; i < v->n_nonplain; i++) {
        uint32_t t = v->nonplain[i];
        if ((int)t < nv && logits[t] != -INFINITY && !token_ok(v, r, (int)t)) logits[t] = -INFINITY;
    }
    for (uint32_t i = 0; i < v->n_others; i++)
        if ((int)v->others[i] < nv) logits[v->others[i]] = -INFINITY; /* EOS too: the value is not complete */
    for (int t = v->n; t < nv; t++) logits[t] = -INFINITY;
}

/* The token groups (by body, sd_json_vocab) that may hold a token the
 * state keeps: in the structural modes those whose body the state accepts
 * (a token's leading whitespace only counts there), and the all-whitespace
 * group; in a number that may end, also those the state after it accepts
 * (a token with leading whitespace is judged there); elsewhere, when no
 * whitespace may come, those the state accepts first. False when that
 * cannot be told (whitespace may come inside the value). */
static bool groups(const sd_json_state *st, const row_state *r, const row_state *end, bool num_end, bool sel[257])
{
    bool ws = r->first[' '] || r->first['\t'] || r->first['\n'] || r->first['\r'];
    if (!structural(st->mode) && !num_end && ws) return false;
    for (int b = 0; b < 256; b++) sel[b] = r->first[b] || (num_end && end->first[b]);
    sel[256] = structural(st->mode) || num_end;
    return true;
}

/* Outside strings a kept token is in one of the groups above: only those
 * are checked; the row is then refused whole and the kept ones put back.
 * False (nothing done) when the groups are too many for this to pay. */
static bool mask_sparse(const sd_json_vocab *v, const sd_json_state *st, const row_state *r, const row_state *end,
                        bool num_end, bool done, float *logits, int nv)
{
    bool sel[257];
    if (!groups(st, r, end, num_end, sel)) return false;
    size_t n = 0;
    for (int b = 0; b < 257; b++)
        if (sel[b]) n += v->body_off[b + 1] - v->body_off[b];
    if (n > (size_t)nv / 4) return false;
    struct kept {
        uint32_t t;
        float logit;
    } stack[1024], *keep = n + v->n_others <= 1024 ? stack : malloc((n + v->n_others) * sizeof *keep);
    if (!keep) return false;
    size_t k = 0;
    for (int b = 0; b < 257; b++) {
        for (uint32_t i = sel[b] ? v->body_off[b] : v->body_off[b + 1]; i < v->body_off[b + 1]; i++) {
            uint32_t t = v->by_body[i];
            if ((int)t < nv && logits[t] != -INFINITY && token_ok(v, num_end && v->lead[t] > 0 ? end : r, (int)t))
                keep[k++] = (struct kept){t, logits[t]};
        }
    }
    for (uint32_t i = 0; done && i < v->n_others; i++) {
        uint32_t t = v->others[i];
        if ((int)t < nv && v->kind[t] == TOK_EOS && logits[t] != -INFINITY) keep[k++] = (struct kept){t, logits[t]};
    }
    for (int t = 0; t < nv; t++) logits[t] = -INFINITY;
    for (size_t i = 0; i < k; i++) logits[keep[i].t] = keep[i].logit;
    if (keep != stack) free(keep);
    return true;
}

void sd_json_mask(const sd_json_vocab *v, const sd_json_schema *schema, const int32_t *output, size_t n, float *logits,
                  int nv)
{
    if (!v || !logits || nv <= 0) return;
    sd_json_state st;
    bool ok = state_after(v, schema, output, output ? n : 0, &st), done = ok && sd_json_complete(&st);
    row_state r, end;
    row_state_set(&r, &st, ok);
    /* a number that may end here ends at a token's leading whitespace: such tokens are judged from the state
     * after the number (structural), with its shortcuts */
    bool num_end = ok && number_may_end(&st);
    if (num_end) {
        sd_json_state e;
        copy_state(&e, &st);
        value_end(&e);
        row_state_set(&end, &e, true);
    }
    if (ok && string_path(&st)) {
        mask_string(v, &r, logits, nv);
        return;
    }
    if (ok && mask_sparse(v, &st, &r, &end, num_end, done, logits, nv)) return;
    for (int t = 0; t < nv; t++) {
        if (logits[t] == -INFINITY) continue;
        int kind = t < v->n ? v->kind[t] : TOK_NEVER;
        bool keep;
        if (kind != TOK_TEXT) keep = kind == TOK_EOS && (done || !ok);
        else keep = ok && token_ok(v, num_end && v->lead[t] > 0 ? &end : &r, t);
        if (!keep) logits[t] = -INFINITY;
    }
}
