/* jinja.c — template lexer and parser (see jinja.h); rendering is in
 * jinja_eval.c. Whitespace: a '-' inside a tag's delimiter strips the
 * whitespace (newlines too) on that side; as with trim_blocks, the first
 * newline after a block or comment tag goes; as with lstrip_blocks, the
 * spaces and tabs between the start of a line and a block or comment tag
 * go. */
#include "jinja.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "jinja_ast.h"

typedef enum {
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
    T_EOF
} t_kind;

typedef struct {
    t_kind k;
    char *s; /* T_TEXT, T_NAME, T_STRING, T_OP (malloc'd) */
    size_t len;
    long long i;
    double f;
    int line;
} tok;

/* Bound on expression height and on statement / expression nesting: parsing, evaluating, printing and
 * freeing recurse once per level, so a template must not be able to exhaust the stack. */
#define J_MAX_DEPTH 256

typedef struct {
    tok *t;
    size_t n, cap, pos;
    char *err;
    size_t errlen;
    bool failed;
    int depth;                       /* parser recursion (nested expressions / statements) */
    const char *line_src, *line_pos; /* line_of's cursor: one pass over the source, not one per token */
    int line_no;
} parser;

static bool fail(parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(parser *p, int line, const char *fmt, ...)
{
    if (p->failed) return false;
    p->failed = true;
    int k = snprintf(p->err, p->errlen, "chat template line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < p->errlen) vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static bool push(parser *p, t_kind k, const char *s, size_t len, int line)
{
    if (sd_grow(&p->t, &p->cap, p->n + 1, sizeof *p->t) != SD_OK) return fail(p, line, "out of memory");
    tok *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    if (s) {
        if (!(t->s = malloc(len + 1))) return fail(p, line, "out of memory");
        memcpy(t->s, s, len);
        t->s[len] = '\0';
        t->len = len;
    }
    p->n++;
    return true;
}

static int line_of(parser *p, const char *src, const char *at)
{
    if (p->line_src != src || at < p->line_pos) {
        p->line_src = p->line_pos = src;
        p->line_no = 1;
    }
    for (; p->line_pos < at; p->line_pos++) p->line_no += *p->line_pos == '\n';
    return p->line_no;
}

/* ---------------------------------------------------------------- lexer */

/* A string literal at *s (quote char q); appends it decoded. */
static bool lex_string(parser *p, const char **s, int line)
{
    char q = **s;
    const char *c = *s + 1;
    char *buf = malloc(strlen(c) + 1);
    size_t n = 0;
    if (!buf) return fail(p, line, "out of memory");
    for (; *c && *c != q; c++) {
        if (*c != '\\' || !c[1]) {
            buf[n++] = *c;
            continue;
        }
        c++;
        switch (*c) {
        case 'n': buf[n++] = '\n'; break;
        case 't': buf[n++] = '\t'; break;
        case 'r': buf[n++] = '\r'; break;
        case '0': buf[n++] = '\0'; break;
        case '\\':
        case '\'':
        case '"': buf[n++] = *c; break;
        default:
            buf[n++] = '\\';
            buf[n++] = *c;
            break;
        }
    }
    if (*c != q) {
        free(buf);
        return fail(p, line, "unterminated string");
    }
    bool ok = push(p, T_STRING, buf, n, line);
    free(buf);
    *s = c + 1;
    return ok;
}

static bool lex_number(parser *p, const char **s, int line)
{
    char *end;
    const char *c = *s;
    while (isdigit((unsigned char)*c)) c++;
    bool real = *c == '.' && isdigit((unsigned char)c[1]);
    if (real) c++;
    while (isdigit((unsigned char)*c)) c++;
    if ((*c == 'e' || *c == 'E') &&
        (isdigit((unsigned char)c[1]) || ((c[1] == '+' || c[1] == '-') && isdigit((unsigned char)c[2]))))
        real = true;
    if (real) {
        double f = strtod(*s, &end);
        if (!push(p, T_FLOAT, NULL, 0, line)) return false;
        p->t[p->n - 1].f = f;
    } else {
        long long i = strtoll(*s, &end, 10);
        if (!push(p, T_INT, NULL, 0, line)) return false;
        p->t[p->n - 1].i = i;
    }
    *s = end;
    return true;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};

/* The tokens of one tag from *s up to its closing delimiter ("}}" or "%}",
 * optionally after '-'); *strip_after tells whether it had the '-'. */
static bool lex_tag(parser *p, const char **s, bool block, bool *strip_after, const char *src)
{
    const char *c = *s;
    char close = block ? '%' : '}';
    int braces = 0; /* dict literals open inside the tag: their '}' is not the tag's */
    for (;;) {
        while (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r') c++;
        int line = line_of(p, src, c);
        if (!*c) return fail(p, line, "unclosed tag");
        if (braces == 0 && ((c[0] == '-' && c[1] == close && c[2] == '}') || (c[0] == close && c[1] == '}'))) {
            *strip_after = c[0] == '-';
            *s = c + (c[0] == '-' ? 3 : 2);
            return push(p, block ? T_BLOCK_END : T_VAR_END, NULL, 0, line);
        }
        if (*c == '\'' || *c == '"') {
            if (!lex_string(p, &c, line)) return false;
        } else if (isdigit((unsigned char)*c)) {
            if (!lex_number(p, &c, line)) return false;
        } else if (isalpha((unsigned char)*c) || *c == '_') {
            const char *b = c;
            while (isalnum((unsigned char)*c) || *c == '_') c++;
            if (!push(p, T_NAME, b, (size_t)(c - b), line)) return false;
        } else {
            size_t n = 1;
            for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2; k++)
                if (!strncmp(c, OPS2[k], 2)) n = 2;
            if (!strchr("+-*/%~<>=()[]{}.,:|!", *c)) return fail(p, line, "unexpected character '%c'", *c);
            braces += *c == '{' ? 1 : *c == '}' && braces > 0 ? -1 : 0;
            if (!push(p, T_OP, c, n, line)) return false;
            c += n;
        }
    }
}

/* Text up to the next tag, with the whitespace rules applied. */
static bool lex_text(parser *p, const char *src, const char *from, const char *to, bool strip_before, bool block)
{
    const char *end = to;
    if (strip_before) {
        while (end > from && isspace((unsigned char)end[-1])) end--;
    } else if (block) { /* lstrip_blocks: spaces and tabs from the line's start */
        const char *w = end;
        while (w > from && (w[-1] == ' ' || w[-1] == '\t')) w--;
        if (w == src || w[-1] == '\n') end = w;
    }
    return end > from ? push(p, T_TEXT, from, (size_t)(end - from), line_of(p, src, from)) : true;
}

static bool lex(parser *p, const char *src)
{
    const char *c = src;
    bool strip_next = false;
    while (!p->failed) {
        if (strip_next)
            while (isspace((unsigned char)*c)) c++;
        strip_next = false;
        const char *t = c;
        while (*t && !(t[0] == '{' && (t[1] == '{' || t[1] == '%' || t[1] == '#'))) t++;
        char kind = *t ? t[1] : 0;
        bool minus = kind && t[2] == '-';
        if (!lex_text(p, src, c, t, minus, kind == '%' || kind == '#')) return false;
        if (!kind) break;
        c = t + 2 + minus;
        if (kind == '#') {
            const char *e = strstr(c, "#}");
            if (!e) return fail(p, line_of(p, src, t), "unclosed comment");
            strip_next = e > c && e[-1] == '-';
            c = e + 2;
        } else {
            if (!push(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, NULL, 0, line_of(p, src, t))) return false;
            if (!lex_tag(p, &c, kind == '%', &strip_next, src)) return false;
        }
        if (!strip_next && kind != '{') { /* trim_blocks */
            if (c[0] == '\n') c++;
            else if (c[0] == '\r' && c[1] == '\n') c += 2;
        }
    }
    return !p->failed && push(p, T_EOF, NULL, 0, line_of(p, src, c));
}

/* ---------------------------------------------------------------- nodes */

static j_node *node(parser *p, j_kind k, int line)
{
    j_node *n = calloc(1, sizeof *n);
    if (!n) {
        fail(p, line, "out of memory");
        return NULL;
    }
    n->kind = k;
    n->line = line;
    return n;
}

static bool list_add(parser *p, j_list *l, j_node *n)
{
    if (!n) return false;
    if (sd_grow(&l->v, &l->cap, l->n + 1, sizeof *l->v) != SD_OK) return fail(p, n->line, "out of memory");
    l->v[l->n++] = n;
    return true;
}

static void node_free(j_node *n);

static int height_of(const j_node *n) { return n ? n->height : 0; }

/* Sets n's height from its operands; too tall (e.g. 1+1+...+1 thousands of times) is an error. */
static j_node *grown(parser *p, j_node *n)
{
    if (!n) return NULL;
    int h = 0;
    const j_node *kids[] = {n->a, n->b, n->c, n->d};
    for (size_t i = 0; i < 4; i++) h = height_of(kids[i]) > h ? height_of(kids[i]) : h;
    for (size_t i = 0; i < n->args.n; i++) h = height_of(n->args.v[i]) > h ? height_of(n->args.v[i]) : h;
    for (size_t i = 0; i < n->kwargs.n; i++) h = height_of(n->kwargs.v[i]) > h ? height_of(n->kwargs.v[i]) : h;
    n->height = h + 1;
    if (n->height > J_MAX_DEPTH) fail(p, n->line, "expression nested too deeply");
    return n;
}

/* Parser recursion guard: false (and the parse fails) beyond J_MAX_DEPTH levels. */
static bool enter(parser *p, int line)
{
    if (++p->depth <= J_MAX_DEPTH) return true;
    p->depth--;
    return fail(p, line, "template nested too deeply");
}

static void list_free(j_list *l)
{
    for (size_t i = 0; i < l->n; i++) node_free(l->v[i]);
    free(l->v);
}

static void node_free(j_node *n)
{
    if (!n) return;
    free(n->name);
    free(n->name2);
    free(n->text);
    json_decref(n->lit);
    node_free(n->a);
    node_free(n->b);
    node_free(n->c);
    node_free(n->d);
    for (size_t i = 0; n->kw && i < n->kwargs.n; i++) free(n->kw[i]);
    free(n->kw);
    list_free(&n->args);
    list_free(&n->kwargs);
    list_free(&n->body);
    list_free(&n->els);
    free(n);
}

/* ---------------------------------------------------------------- expressions */

static tok *peek(parser *p) { return &p->t[p->pos]; }
static tok *next(parser *p)
{
    tok *t = &p->t[p->pos];
    if (t->k != T_EOF) p->pos++;
    return t;
}
static bool is_op(const tok *t, const char *op) { return t->k == T_OP && !strcmp(t->s, op); }
static bool is_name(const tok *t, const char *nm) { return t->k == T_NAME && !strcmp(t->s, nm); }

static bool expect_op(parser *p, const char *op)
{
    tok *t = next(p);
    return is_op(t, op) ? true : fail(p, t->line, "expected '%s'", op);
}

static j_node *parse_expr(parser *p);
static j_node *parse_unary(parser *p);

static char *dup_name(parser *p, const tok *t)
{
    char *s = strdup(t->s);
    if (!s) fail(p, t->line, "out of memory");
    return s;
}

/* ( args, name = value, ... ) after the '(' was read. */
static bool parse_args(parser *p, j_node *n)
{
    while (!p->failed && !is_op(peek(p), ")")) {
        tok *t = peek(p);
        if (t->k == T_NAME && is_op(&p->t[p->pos + 1], "=")) {
            p->pos += 2;
            char **kw = realloc(n->kw, (n->kwargs.n + 1) * sizeof *kw);
            if (!kw) return fail(p, t->line, "out of memory");
            n->kw = kw;
            kw[n->kwargs.n] = dup_name(p, t);
            if (!list_add(p, &n->kwargs, parse_expr(p))) {
                free(kw[n->kwargs.n]); /* not counted in kwargs.n: node_free would miss it */
                return false;
            }
        } else if (!list_add(p, &n->args, parse_expr(p))) {
            return false;
        }
        if (!is_op(peek(p), ",")) break;
        next(p);
    }
    return expect_op(p, ")");
}

static j_node *lit(parser *p, json_t *v, int line)
{
    j_node *n = v ? node(p, J_LIT, line) : NULL;
    if (n) n->lit = v;
    else if (!v) fail(p, line, "out of memory");
    return n;
}

static j_node *parse_list_or_dict(parser *p, const tok *open)
{
    bool dict = is_op(open, "{");
    j_node *n = node(p, dict ? J_DICT : J_LIST, open->line);
    const char *close = dict ? "}" : "]";
    while (n && !p->failed && !is_op(peek(p), close)) {
        if (!list_add(p, &n->args, parse_expr(p))) break;
        if (dict && (!expect_op(p, ":") || !list_add(p, &n->kwargs, parse_expr(p)))) break;
        if (!is_op(peek(p), ",")) break;
        next(p);
    }
    if (n && !p->failed) expect_op(p, close);
    return grown(p, n);
}

static j_node *parse_primary(parser *p)
{
    tok *t = next(p);
    switch (t->k) {
    case T_STRING: {
        json_t *v = json_stringn(t->s, t->len);
        if (!v) return fail(p, t->line, "string literal is not valid UTF-8"), NULL;
        j_node *n = lit(p, v, t->line);
        while (n && peek(p)->k == T_STRING) { /* adjacent literals join */
            tok *u = next(p);
            size_t la = json_string_length(n->lit);
            char *j = malloc(la + u->len + 1);
            if (!j) return fail(p, u->line, "out of memory"), n;
            memcpy(j, json_string_value(n->lit), la);
            memcpy(j + la, u->s, u->len);
            v = json_stringn(j, la + u->len);
            free(j);
            if (!v) return fail(p, u->line, "string literal is not valid UTF-8"), n;
            json_decref(n->lit);
            n->lit = v;
        }
        return n;
    }
    case T_INT: return lit(p, json_integer(t->i), t->line);
    case T_FLOAT: return lit(p, json_real(t->f), t->line);
    case T_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) return lit(p, json_true(), t->line);
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) return lit(p, json_false(), t->line);
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) return lit(p, json_null(), t->line);
        {
            j_node *n = node(p, J_NAME, t->line);
            if (n) n->name = dup_name(p, t);
            return n;
        }
    case T_OP:
        if (is_op(t, "(")) {
            j_node *n = parse_expr(p);
            expect_op(p, ")");
            return n;
        }
        if (is_op(t, "[") || is_op(t, "{")) return parse_list_or_dict(p, t);
        /* fallthrough */
    default: fail(p, t->line, "unexpected %s", t->k == T_OP ? t->s : "end of tag"); return NULL;
    }
}

/* x[...]: an index or a slice a:b:c. */
static j_node *parse_subscript(parser *p, j_node *obj, int line)
{
    j_node *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(peek(p), ":") && !is_op(peek(p), "]")) parts[k] = parse_expr(p);
        if (!is_op(peek(p), ":") || k == 2) break;
        next(p);
        slice = true;
        k++;
    }
    expect_op(p, "]");
    j_node *n = node(p, slice ? J_SLICE : J_ITEM, line);
    if (!n) {
        for (int i = 0; i < 3; i++) node_free(parts[i]);
        node_free(obj);
        return NULL;
    }
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    if (!slice && !n->b) fail(p, line, "empty subscript");
    return grown(p, n);
}

static j_node *parse_postfix(parser *p, j_node *n)
{
    while (n && !p->failed) {
        tok *t = peek(p);
        j_node *m;
        if (is_op(t, ".")) {
            next(p);
            tok *nm = next(p);
            if (nm->k != T_NAME && nm->k != T_INT) return fail(p, nm->line, "expected a name after '.'"), n;
            if (!(m = node(p, J_ATTR, t->line))) return n;
            char num[32];
            if (nm->k == T_INT) snprintf(num, sizeof num, "%lld", nm->i);
            m->name = strdup(nm->k == T_INT ? num : nm->s);
        } else if (is_op(t, "[")) {
            next(p);
            n = parse_subscript(p, n, t->line);
            continue;
        } else if (is_op(t, "(")) {
            next(p);
            if (!(m = node(p, J_CALL, t->line))) return n;
            m->a = n;
            parse_args(p, m);
            n = grown(p, m);
            continue;
        } else {
            break;
        }
        m->a = n;
        n = grown(p, m);
    }
    return n;
}

/* Filters (| name(args)) and tests (is [not] name(args)) after a value. */
static j_node *parse_filters(parser *p, j_node *n)
{
    while (n && !p->failed) {
        tok *t = peek(p);
        bool test = is_name(t, "is");
        if (!is_op(t, "|") && !test) break;
        next(p);
        j_node *m = node(p, test ? J_TEST : J_FILTER, t->line);
        if (!m) break;
        m->a = n;
        n = m;
        if (test && is_name(peek(p), "not")) {
            next(p);
            m->negate = 1;
        }
        tok *nm = next(p);
        if (nm->k != T_NAME) {
            fail(p, nm->line, "expected a %s name", test ? "test" : "filter");
            break;
        }
        m->name = dup_name(p, nm);
        if (is_op(peek(p), "(")) {
            next(p);
            parse_args(p, m);
        } else if (test && (peek(p)->k == T_STRING || peek(p)->k == T_INT || peek(p)->k == T_FLOAT)) {
            list_add(p, &m->args, parse_primary(p)); /* `is divisibleby 3` */
        }
        n = parse_postfix(p, grown(p, n));
    }
    return n;
}

static j_node *parse_unary(parser *p)
{
    tok *t = peek(p);
    if (is_op(t, "-") || is_op(t, "+")) { /* -x|f is (-x)|f, as in jinja2 */
        next(p);
        j_node *a = parse_postfix(p, parse_primary(p));
        if (is_op(t, "-")) {
            j_node *n = node(p, J_NEG, t->line);
            if (n) n->a = a;
            else node_free(a);
            a = grown(p, n);
        }
        return parse_filters(p, a);
    }
    return parse_filters(p, parse_postfix(p, parse_primary(p)));
}

static j_node *binary(parser *p, j_kind k, j_op op, j_node *a, j_node *b, int line)
{
    j_node *n = node(p, k, line);
    if (!n) {
        node_free(a);
        node_free(b);
        return NULL;
    }
    n->op = op;
    n->a = a;
    n->b = b;
    return grown(p, n);
}

static j_node *parse_pow(parser *p)
{
    j_node *n = parse_unary(p);
    while (n && is_op(peek(p), "**")) n = binary(p, J_BIN, OP_POW, n, (next(p), parse_unary(p)), n->line);
    return n;
}

static j_node *parse_math2(parser *p)
{
    static const struct {
        const char *s;
        j_op op;
    } OPS[] = {{"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FLOORDIV}, {"%", OP_MOD}};
    j_node *n = parse_pow(p);
    for (bool more = true; n && more;) {
        more = false;
        for (size_t k = 0; k < 4 && !more; k++)
            if (is_op(peek(p), OPS[k].s)) {
                next(p);
                n = binary(p, J_BIN, OPS[k].op, n, parse_pow(p), n->line);
                more = true;
            }
    }
    return n;
}

static j_node *parse_concat(parser *p)
{
    j_node *n = parse_math2(p);
    while (n && is_op(peek(p), "~")) n = binary(p, J_BIN, OP_CONCAT, n, (next(p), parse_math2(p)), n->line);
    return n;
}

static j_node *parse_math1(parser *p)
{
    j_node *n = parse_concat(p);
    while (n && (is_op(peek(p), "+") || is_op(peek(p), "-"))) {
        j_op op = is_op(next(p), "+") ? OP_ADD : OP_SUB;
        n = binary(p, J_BIN, op, n, parse_concat(p), n->line);
    }
    return n;
}

static j_node *parse_compare(parser *p)
{
    static const struct {
        const char *s;
        j_op op;
    } OPS[] = {{"==", OP_EQ}, {"!=", OP_NE}, {"<", OP_LT}, {"<=", OP_LE}, {">", OP_GT}, {">=", OP_GE}};
    j_node *n = parse_math1(p);
    while (n && !p->failed) {
        tok *t = peek(p);
        int op = -1;
        for (size_t k = 0; k < 6; k++)
            if (is_op(t, OPS[k].s)) op = (int)OPS[k].op;
        if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(&p->t[p->pos + 1], "in")) op = OP_NOTIN, next(p);
        if (op < 0) break;
        next(p);
        n = binary(p, J_BIN, (j_op)op, n, parse_math1(p), t->line);
    }
    return n;
}

static j_node *parse_not(parser *p)
{
    tok *t = peek(p);
    if (!is_name(t, "not")) return parse_compare(p);
    next(p);
    if (!enter(p, t->line)) return NULL;
    j_node *n = node(p, J_NOT, t->line);
    j_node *a = parse_not(p);
    p->depth--;
    if (n) n->a = a;
    else node_free(a);
    return grown(p, n);
}

static j_node *parse_and(parser *p)
{
    j_node *n = parse_not(p);
    while (n && is_name(peek(p), "and")) n = binary(p, J_AND, OP_ADD, n, (next(p), parse_not(p)), n->line);
    return n;
}

static j_node *parse_or(parser *p)
{
    j_node *n = parse_and(p);
    while (n && is_name(peek(p), "or")) n = binary(p, J_OR, OP_ADD, n, (next(p), parse_and(p)), n->line);
    return n;
}

/* or_expr [if or_expr [else expr]] */
static j_node *parse_expr(parser *p)
{
    if (!enter(p, peek(p)->line)) return NULL;
    j_node *n = parse_or(p);
    while (n && !p->failed && is_name(peek(p), "if")) {
        tok *t = next(p);
        j_node *c = node(p, J_COND, t->line);
        if (!c) break;
        c->b = n;
        c->a = parse_or(p);
        if (is_name(peek(p), "else")) {
            next(p);
            c->c = parse_expr(p);
        }
        n = grown(p, c);
    }
    p->depth--;
    return n;
}

/* ---------------------------------------------------------------- statements */

static bool parse_body(parser *p, const char *const *stops, const char **found, j_list *out);

static bool block_end(parser *p)
{
    tok *t = next(p);
    return t->k == T_BLOCK_END ? true : fail(p, t->line, "expected the end of the tag");
}

/* if ... (elif ...)* (else ...)? endif, after "if". */
static j_node *parse_if_body(parser *p, int line);

static j_node *parse_if(parser *p, int line)
{
    if (!enter(p, line)) return NULL; /* nested ifs and elif chains recurse */
    j_node *n = parse_if_body(p, line);
    p->depth--;
    return n;
}

static j_node *parse_if_body(parser *p, int line)
{
    static const char *const STOPS[] = {"elif", "else", "endif", NULL};
    j_node *n = node(p, J_IF, line);
    if (!n) return NULL;
    n->a = parse_expr(p);
    const char *found = NULL;
    if (!block_end(p) || !parse_body(p, STOPS, &found, &n->body)) return n;
    if (!strcmp(found, "elif")) {
        list_add(p, &n->els, parse_if(p, peek(p)->line));
        return n; /* the nested if consumed endif */
    }
    if (!strcmp(found, "else")) {
        static const char *const END[] = {"endif", NULL};
        if (block_end(p)) parse_body(p, END, &found, &n->els);
    }
    block_end(p);
    return n;
}

static j_node *parse_for(parser *p, int line)
{
    static const char *const STOPS[] = {"else", "endfor", NULL};
    j_node *n = node(p, J_FOR, line);
    if (!n) return NULL;
    tok *t = next(p);
    if (t->k != T_NAME) return fail(p, t->line, "expected a loop variable"), n;
    n->name = dup_name(p, t);
    if (is_op(peek(p), ",")) {
        next(p);
        t = next(p);
        if (t->k != T_NAME) return fail(p, t->line, "expected a loop variable"), n;
        n->name2 = dup_name(p, t);
    }
    if (!is_name(next(p), "in")) return fail(p, line, "expected 'in'"), n;
    n->a = parse_or(p); /* not parse_expr: a trailing `if` filters the items */
    if (is_name(peek(p), "if")) {
        next(p);
        n->b = parse_expr(p);
    }
    const char *found = NULL;
    if (!block_end(p) || !parse_body(p, STOPS, &found, &n->body)) return n;
    if (!strcmp(found, "else")) {
        static const char *const END[] = {"endfor", NULL};
        if (block_end(p)) parse_body(p, END, &found, &n->els);
    }
    block_end(p);
    return n;
}

static j_node *parse_set(parser *p, int line)
{
    tok *t = next(p);
    if (t->k != T_NAME) return fail(p, t->line, "expected a name after 'set'"), NULL;
    bool block = peek(p)->k == T_BLOCK_END;
    j_node *n = node(p, block ? J_SETBLOCK : J_SET, line);
    if (!n) return NULL;
    n->name = dup_name(p, t);
    if (block) {
        static const char *const END[] = {"endset", NULL};
        const char *found;
        if (block_end(p) && parse_body(p, END, &found, &n->body)) block_end(p);
        return n;
    }
    if (is_op(peek(p), ".")) {
        next(p);
        tok *a = next(p);
        if (a->k != T_NAME) return fail(p, a->line, "expected an attribute name"), n;
        n->name2 = dup_name(p, a);
    }
    if (!expect_op(p, "=")) return n;
    n->a = parse_expr(p);
    block_end(p);
    return n;
}

/* One {% ... %} statement (after the '{%'); NULL with p->failed on error. */
static j_node *parse_stmt_body(parser *p, tok *t);

static j_node *parse_stmt(parser *p)
{
    tok *t = next(p);
    if (!enter(p, t->line)) return NULL;
    j_node *n = parse_stmt_body(p, t);
    p->depth--;
    return n;
}

static j_node *parse_stmt_body(parser *p, tok *t)
{
    if (t->k != T_NAME) return fail(p, t->line, "expected a statement"), NULL;
    if (!strcmp(t->s, "if")) return parse_if(p, t->line);
    if (!strcmp(t->s, "for")) return parse_for(p, t->line);
    if (!strcmp(t->s, "set")) return parse_set(p, t->line);
    if (!strcmp(t->s, "generation")) { /* Hugging Face's marker of assistant text: rendered as its body */
        static const char *const END[] = {"endgeneration", NULL};
        j_node *n = node(p, J_IF, t->line);
        const char *found;
        if (!n) return NULL;
        n->a = lit(p, json_true(), t->line);
        if (block_end(p) && parse_body(p, END, &found, &n->body)) block_end(p);
        return n;
    }
    fail(p, t->line, "'%s' is not supported in chat templates here", t->s);
    return NULL;
}

/* Statements until one of stops (a block tag whose name is in the NULL-
 * terminated list; *found names it, its tag's name consumed) or the end. */
static bool parse_body(parser *p, const char *const *stops, const char **found, j_list *out)
{
    *found = NULL;
    while (!p->failed) {
        tok *t = next(p);
        if (t->k == T_EOF) {
            if (stops) {
                size_t last = 0;
                while (stops[last + 1]) last++;
                return fail(p, t->line, "missing {%% %s %%}", stops[last]);
            }
            return true;
        }
        if (t->k == T_TEXT) {
            j_node *n = node(p, J_TEXT, t->line);
            if (n) {
                n->text = t->s;
                n->len = t->len;
                t->s = NULL;
            }
            list_add(p, out, n);
        } else if (t->k == T_VAR_BEGIN) {
            j_node *n = node(p, J_OUT, t->line);
            if (n) n->a = parse_expr(p);
            list_add(p, out, n);
            tok *e = next(p);
            if (e->k != T_VAR_END) return fail(p, e->line, "expected '}}'");
        } else if (t->k == T_BLOCK_BEGIN) {
            tok *kw = peek(p);
            for (size_t i = 0; stops && stops[i] && kw->k == T_NAME; i++)
                if (!strcmp(kw->s, stops[i])) {
                    *found = stops[i];
                    next(p);
                    return true;
                }
            list_add(p, out, parse_stmt(p));
        } else {
            return fail(p, t->line, "unexpected token");
        }
    }
    return false;
}

sd_status sd_jinja_parse(const char *src, sd_jinja **out, char *err, size_t errlen)
{
    *out = NULL;
    parser p = {.err = err, .errlen = errlen};
    sd_jinja *t = calloc(1, sizeof *t);
    const char *found;
    bool ok = t && lex(&p, src) && parse_body(&p, NULL, &found, &t->root);
    for (size_t i = 0; i < p.n; i++) free(p.t[i].s);
    free(p.t);
    if (!ok || p.failed) {
        if (!t) snprintf(err, errlen, "out of memory");
        sd_jinja_free(t);
        return SD_ERR_FORMAT;
    }
    *out = t;
    return SD_OK;
}

void sd_jinja_free(sd_jinja *t)
{
    if (!t) return;
    list_free(&t->root);
    free(t);
}
