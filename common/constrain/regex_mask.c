/* regex_mask.c — output by a regular expression: PCRE2's DFA matcher
 * followed piece by piece (regex_mask.h).
 *
 * A state is PCRE2's restart data after the output so far: the DFA's active
 * states (pcre2_dfa_match keeps them in the first words of its workspace
 * when it stops at a partial match, and takes them from there with
 * PCRE2_DFA_RESTART). They are kept compact — two words and three per
 * active state, normalised to the first of the workspace's two lists — so
 * that trying a token copies a few dozen bytes, not the workspace; a
 * self-test at the first compile checks that a compact copy restarts as the
 * whole workspace does (else regular expressions are refused). Bytes of a
 * character not yet finished wait in pend (PCRE2 matches whole characters).
 * Everything here is reentrant: the compiled code is shared read-only, the
 * workspaces are the caller's. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex_mask.h"

#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "status.h"

#define MAX_NAMED 1024       /* non-ASCII characters of a pattern tried as finishes */
#define MIN_STATES 64        /* a workspace's room, in DFA states per list, at first */
#define MAX_STATES (1 << 16) /* ... at most */
#define RUN_OPTS (PCRE2_PARTIAL_HARD)

typedef struct lazy lazy;

struct sd_regex {
    pcre2_code *code; /* "(?:pattern)\z", anchored, UTF */
    lazy *lz;         /* the memo of the mask (below): mutable, behind its mutex */
    char *pattern;
    bool empty_ok; /* the empty output matches */
    bool ascii;    /* no non-ASCII character can match anywhere (ascii_only): such tokens are refused at once */
    unsigned n_named;
    unsigned char (*named)[4]; /* [n_named]: characters the pattern names, UTF-8 (named_len bytes) */
    uint8_t *named_len;
};

struct sd_regex_state {
    const sd_regex *rx;
    bool ok;       /* false: refused */
    bool started;  /* a character was fed: ws holds PCRE2's restart data */
    uint8_t npend; /* bytes of an unfinished character */
    unsigned char pend[4];
    int count; /* active DFA states */
    int cap;   /* ws's room in ints */
    int *ws;   /* [2 + 3 * count]: PCRE2's workspace words 0 and 1, then the states */
};

/* A workspace and match data for runs (one per caller at a time). */
typedef struct scratch {
    int *w;
    int wscount; /* ints */
    pcre2_match_data *md;
} scratch;

static bool scratch_fit(scratch *s, int states)
{
    size_t need = 2 + 6 * (size_t)(states < MIN_STATES ? MIN_STATES : states);
    if (s->w && (size_t)s->wscount >= need) return true;
    if (states > MAX_STATES) return false;
    int *w = realloc(s->w, need * sizeof *w);
    if (!w) return false;
    s->w = w;
    s->wscount = (int)need;
    return true;
}

static bool scratch_init(scratch *s, int states)
{
    memset(s, 0, sizeof *s);
    s->md = pcre2_match_data_create(1, NULL);
    return s->md && scratch_fit(s, states);
}

static void scratch_free(scratch *s)
{
    free(s->w);
    pcre2_match_data_free(s->md);
}

static bool viable(int rc) { return rc == PCRE2_ERROR_PARTIAL || rc >= 0; }

/* One DFA run over p[0..n) from the state (a fresh match before the first
 * character); the workspace grows while PCRE2 asks for more. */
static int run(const sd_regex_state *st, const unsigned char *p, size_t n, uint32_t opts, scratch *s)
{
    for (int states = st->count;;) {
        if (!scratch_fit(s, states)) return PCRE2_ERROR_NOMEMORY;
        if (st->started) memcpy(s->w, st->ws, (2 + 3 * (size_t)st->count) * sizeof *s->w);
        /* a restart's piece does not begin the text: ^ does not match there */
        uint32_t o = opts | (st->started ? PCRE2_DFA_RESTART | PCRE2_NOTBOL : 0);
        int rc = pcre2_dfa_match(st->rx->code, p, n, 0, o, s->md, NULL, s->w, (PCRE2_SIZE)s->wscount);
        if (rc != PCRE2_ERROR_DFA_WSSIZE) return rc;
        states = (s->wscount - 2) / 3; /* twice the lists' room */
    }
}

/* Keeps the states a run stopped at (compact, in the first list). */
static bool keep_states(sd_regex_state *st, const scratch *s)
{
    int count = s->w[1], half = ((s->wscount - 2) - (s->wscount - 2) % 6) / 6;
    if (count < 1 || count > half) return false;
    if (2 + 3 * count > st->cap) {
        int *ws = realloc(st->ws, (2 + 3 * (size_t)count) * sizeof *ws);
        if (!ws) return false;
        st->ws = ws;
        st->cap = 2 + 3 * count;
    }
    st->ws[0] = 0;
    st->ws[1] = count;
    memcpy(st->ws + 2, s->w + 2 + (s->w[0] ? 3 * half : 0), 3 * (size_t)count * sizeof *st->ws);
    st->count = count;
    st->started = true;
    return true;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

static int utf8_need(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
}

/* How many of p[0..n)'s last bytes begin a character they do not finish
 * (0..3; 0 also when the end is malformed: PCRE2 refuses it). */
static int unfinished(const unsigned char *p, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = p[n - back];
        if ((c & 0xC0) == 0x80) continue;
        int need = utf8_need(c);
        return need > (int)back ? (int)back : 0;
    }
    return 0;
}

static int encode(uint32_t cp, unsigned char out[4])
{
    if (!utf8proc_codepoint_valid((utf8proc_int32_t)cp)) return 0;
    return (int)utf8proc_encode_char((utf8proc_int32_t)cp, out);
}

/* The lowest (hi false) or highest character that begins with the bytes
 * t[0..k): its UTF-8 in out; 0 when none does. */
static int finish_bound(const unsigned char *t, int k, bool hi, unsigned char out[4])
{
    int need = utf8_need(t[0]);
    if (k < 1 || k > 3 || need <= k) return 0;
    memcpy(out, t, (size_t)k);
    for (int i = k; i < need; i++) {
        unsigned char lo = 0x80, top = 0xBF;
        if (i == 1 && t[0] == 0xE0) lo = 0xA0;
        if (i == 1 && t[0] == 0xF0) lo = 0x90;
        if (i == 1 && t[0] == 0xED) top = 0x9F;
        if (i == 1 && t[0] == 0xF4) top = 0x8F;
        out[i] = hi ? top : lo;
    }
    return need;
}

/* ---- the state ---------------------------------------------------------------- */

/* Whether p[0..n) (pend first, then the bytes) may come: the finished
 * characters keep a match possible, and an unfinished last one can be
 * finished to a character that does too (regex_mask.h). */
static bool accepts_with(const sd_regex_state *st, const unsigned char *p, size_t n, scratch *s)
{
    if (!st->ok) return false;
    if (n == 0) return true;
    unsigned char stack[512], *buf = st->npend + n + 4 <= sizeof stack ? stack : malloc(st->npend + n + 4);
    if (!buf) return false;
    memcpy(buf, st->pend, st->npend);
    memcpy(buf + st->npend, p, n);
    size_t m = st->npend + n;
    int tail = unfinished(buf, m);
    bool ok = false;
    if (tail == 0) {
        ok = viable(run(st, buf, m, RUN_OPTS, s));
    } else {
        const unsigned char *t = buf + m - tail;
        unsigned char lead[4];
        memcpy(lead, t, (size_t)tail);
        const sd_regex *rx = st->rx;
        for (unsigned i = 0; !ok && i < 2 + rx->n_named; i++) {
            unsigned char ch[4];
            int len = i < 2 ? finish_bound(lead, tail, i == 1, ch) : rx->named_len[i - 2];
            if (i >= 2) memcpy(ch, rx->named[i - 2], (size_t)len);
            if (len <= tail || memcmp(ch, lead, (size_t)tail)) continue;
            memcpy(buf + m - tail, ch, (size_t)len);
            ok = viable(run(st, buf, m - (size_t)tail + (size_t)len, RUN_OPTS, s));
        }
    }
    if (buf != stack) free(buf);
    return ok;
}

sd_status sd_regex_state_new(const sd_regex *rx, sd_regex_state **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!rx) return sd_seterr(err, errlen, SD_ERR_ARG, "regex state: no expression");
    sd_regex_state *st = calloc(1, sizeof *st);
    if (!st) return sd_seterr(err, errlen, SD_ERR_NOMEM, "regex state: out of memory");
    st->rx = rx;
    st->ok = true;
    *out = st;
    return SD_OK;
}

void sd_regex_state_free(sd_regex_state *st)
{
    if (!st) return;
    free(st->ws);
    free(st);
}

static bool feed_with(sd_regex_state *st, const unsigned char *p, size_t n, scratch *s)
{
    if (!st->ok || n == 0) return st->ok;
    if (!accepts_with(st, p, n, s)) return st->ok = false;
    unsigned char stack[512], *buf = st->npend + n <= sizeof stack ? stack : malloc(st->npend + n);
    if (!buf) return st->ok = false;
    memcpy(buf, st->pend, st->npend);
    memcpy(buf + st->npend, p, n);
    size_t m = st->npend + n;
    int tail = unfinished(buf, m);
    if (m > (size_t)tail) st->ok = viable(run(st, buf, m - (size_t)tail, RUN_OPTS, s)) && keep_states(st, s);
    memcpy(st->pend, buf + m - tail, (size_t)tail);
    st->npend = (uint8_t)tail;
    if (buf != stack) free(buf);
    return st->ok;
}

static bool complete_with(const sd_regex_state *st, scratch *s)
{
    if (!st->ok || st->npend) return false;
    if (!st->started) return st->rx->empty_ok;
    return run(st, (const unsigned char *)"", 0, 0, s) >= 0;
}

bool sd_regex_state_feed(sd_regex_state *st, const char *p, size_t n)
{
    scratch s;
    bool ok = st && scratch_init(&s, st->count) && feed_with(st, (const unsigned char *)p, n, &s);
    if (st) scratch_free(&s);
    if (st && !ok) st->ok = false;
    return ok;
}

bool sd_regex_state_accepts(const sd_regex_state *st, const char *p, size_t n)
{
    scratch s;
    bool ok = st && scratch_init(&s, st->count) && accepts_with(st, (const unsigned char *)p, n, &s);
    if (st) scratch_free(&s);
    return ok;
}

bool sd_regex_state_complete(const sd_regex_state *st)
{
    scratch s;
    bool ok = st && scratch_init(&s, st->count) && complete_with(st, &s);
    if (st) scratch_free(&s);
    return ok;
}

/* ---- the memo: PCRE2's states interned, their steps remembered ---------------------- */

/* The mask tries every candidate token from the same few states: each step
 * of PCRE2's DFA over one character from an interned state is run once and
 * remembered (state, character) -> state, so a token costs a table lookup
 * per character once its steps are known — PCRE2 still decides every step.
 * The memo is flushed when it grows past its bounds (at the start of a mask,
 * never during one). */
#define LZ_START 0u                 /* the state before any character */
#define LZ_DEAD UINT32_MAX          /* no match possible */
#define LZ_EMPTY UINT32_MAX         /* an unused slot */
#define LZ_UNKNOWN (UINT32_MAX - 1) /* a step not yet run */
#define LZ_TAIL 0x80000000u         /* key of an unfinished character: LZ_TAIL | length << 24 | its bytes */
#define LZ_MAX_EDGES (1u << 18)
#define LZ_MAX_STATES (1u << 15)

typedef struct lz_state {
    int *ws;         /* compact restart data [2 + 3 * count] (NULL: the start) */
    uint32_t *ascii; /* [128] the steps over ASCII characters (LZ_UNKNOWN: not yet run), or NULL */
    int count;
    uint64_t hash;
    int8_t complete; /* matched whole: -1 not yet known */
} lz_state;

typedef struct lz_edge {
    uint32_t from, key, to; /* to: a state, LZ_DEAD; for an unfinished character 1 (may be finished) or 0 */
} lz_edge;

/* A state of the mask: an interned state and the bytes of a character not
 * yet finished. */
typedef struct lz_pos {
    uint32_t id;
    int npend;
    unsigned char pend[4];
} lz_pos;

/* A row's answer remembered: the text tokens that may come at a position. */
typedef struct lz_row {
    lz_pos at;
    uint32_t *ids; /* NULL: unused */
    size_t n;
    uint64_t used; /* clock of the last use */
} lz_row;

#define LZ_ROWS 8

struct lazy {
    pthread_mutex_t mu;
    lz_row rows[LZ_ROWS];
    uint64_t clock;
    lz_state *st;
    uint32_t n_st, cap_st;
    uint32_t *st_tab, st_mask; /* state ids by hash, open addressing */
    lz_edge *edges;
    uint32_t n_edges, edge_mask;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xFF51AFD7ED558CCDull;
}

static void lz_clear(lazy *z)
{
    for (uint32_t i = 0; i < z->n_st; i++) {
        free(z->st[i].ws);
        free(z->st[i].ascii);
    }
    z->n_st = 1; /* the start */
    z->st[0] = (lz_state){.complete = -1};
    memset(z->st_tab, 0xFF, ((size_t)z->st_mask + 1) * sizeof *z->st_tab);
    memset(z->edges, 0xFF, ((size_t)z->edge_mask + 1) * sizeof *z->edges);
    z->n_edges = 0;
    for (int i = 0; i < LZ_ROWS; i++) {
        free(z->rows[i].ids);
        z->rows[i] = (lz_row){.used = 0};
    }
}

static lazy *lz_new(void)
{
    lazy *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    z->cap_st = 64;
    z->st_mask = 127;
    z->edge_mask = 4095;
    z->st = malloc(z->cap_st * sizeof *z->st);
    z->st_tab = malloc(((size_t)z->st_mask + 1) * sizeof *z->st_tab);
    z->edges = malloc(((size_t)z->edge_mask + 1) * sizeof *z->edges);
    if (!z->st || !z->st_tab || !z->edges || pthread_mutex_init(&z->mu, NULL)) {
        free(z->st);
        free(z->st_tab);
        free(z->edges);
        free(z);
        return NULL;
    }
    z->n_st = 0;
    lz_clear(z);
    return z;
}

static void lz_free(lazy *z)
{
    if (!z) return;
    lz_clear(z);
    free(z->st[0].ws);
    pthread_mutex_destroy(&z->mu);
    free(z->st);
    free(z->st_tab);
    free(z->edges);
    free(z);
}

/* The id of the state with restart data ws (copied when new); LZ_DEAD when
 * memory runs out. */
static uint32_t lz_intern(lazy *z, const int *ws, int count)
{
    size_t n = 2 + 3 * (size_t)count;
    uint64_t h = (uint64_t)count;
    for (size_t i = 2; i < n; i++) h = mix(h, (uint32_t)ws[i]);
    for (uint32_t i = (uint32_t)h & z->st_mask;; i = (i + 1) & z->st_mask) {
        uint32_t id = z->st_tab[i];
        if (id == LZ_EMPTY) break;
        if (z->st[id].hash == h && z->st[id].count == count && !memcmp(z->st[id].ws, ws, n * sizeof *ws)) return id;
    }
    if (z->n_st == z->cap_st) {
        lz_state *st = realloc(z->st, 2 * (size_t)z->cap_st * sizeof *st);
        if (!st) return LZ_DEAD;
        z->st = st;
        z->cap_st *= 2;
    }
    if (2 * (z->n_st + 1) > z->st_mask + 1) { /* grow the index */
        uint32_t mask = 2 * z->st_mask + 1, *tab = malloc(((size_t)mask + 1) * sizeof *tab);
        if (!tab) return LZ_DEAD;
        memset(tab, 0xFF, ((size_t)mask + 1) * sizeof *tab);
        for (uint32_t id = 1; id < z->n_st; id++) {
            uint32_t i = (uint32_t)z->st[id].hash & mask;
            while (tab[i] != LZ_EMPTY) i = (i + 1) & mask;
            tab[i] = id;
        }
        free(z->st_tab);
        z->st_tab = tab;
        z->st_mask = mask;
    }
    int *copy = malloc(n * sizeof *copy);
    if (!copy) return LZ_DEAD;
    memcpy(copy, ws, n * sizeof *ws);
    uint32_t id = z->n_st++, i = (uint32_t)h & z->st_mask;
    z->st[id] = (lz_state){copy, NULL, count, h, -1};
    while (z->st_tab[i] != LZ_EMPTY) i = (i + 1) & z->st_mask;
    z->st_tab[i] = id;
    return id;
}

static lz_edge *edge_at(const lazy *z, uint32_t from, uint32_t key)
{
    uint32_t i = (uint32_t)mix(from, key) & z->edge_mask;
    while (z->edges[i].from != LZ_EMPTY && (z->edges[i].from != from || z->edges[i].key != key))
        i = (i + 1) & z->edge_mask;
    return &z->edges[i];
}

static void edge_put(lazy *z, uint32_t from, uint32_t key, uint32_t to)
{
    if (2 * (z->n_edges + 1) > z->edge_mask + 1) { /* grow (when memory runs out the step is not remembered) */
        uint32_t old = z->edge_mask, mask = 2 * old + 1;
        lz_edge *e = malloc(((size_t)mask + 1) * sizeof *e), *prev = z->edges;
        if (!e) return;
        memset(e, 0xFF, ((size_t)mask + 1) * sizeof *e);
        z->edges = e;
        z->edge_mask = mask;
        for (uint32_t i = 0; i <= old; i++)
            if (prev[i].from != LZ_EMPTY) *edge_at(z, prev[i].from, prev[i].key) = prev[i];
        free(prev);
    }
    *edge_at(z, from, key) = (lz_edge){from, key, to};
    z->n_edges++;
}

/* The state in which interned state `from` is, as sd_regex_state (borrowed). */
static sd_regex_state lz_view(const sd_regex *rx, const lazy *z, uint32_t from)
{
    return (sd_regex_state){
        .rx = rx, .ok = true, .started = from != LZ_START, .count = z->st[from].count, .ws = z->st[from].ws};
}

/* PCRE2's step over c[0..len) from `from`: the state after it, interned. */
static uint32_t lz_run(const sd_regex *rx, lazy *z, uint32_t from, const unsigned char *c, int len, scratch *s)
{
    sd_regex_state view = lz_view(rx, z, from), next = {.rx = rx, .ok = true};
    uint32_t to = LZ_DEAD;
    if (viable(run(&view, c, (size_t)len, RUN_OPTS, s)) && keep_states(&next, s))
        to = lz_intern(z, next.ws, next.count);
    free(next.ws);
    return to;
}

/* The state after one whole character c[0..len) (valid UTF-8) from `from`:
 * ASCII steps in the state's own table, the others in the hash table. */
static uint32_t lz_step(const sd_regex *rx, lazy *z, uint32_t from, const unsigned char *c, int len, scratch *s)
{
    if (len == 1 && c[0] < 0x80) {
        uint32_t *t = z->st[from].ascii;
        if (t && t[c[0]] != LZ_UNKNOWN) return t[c[0]];
        if (!t && (t = malloc(128 * sizeof *t))) {
            for (int i = 0; i < 128; i++) t[i] = LZ_UNKNOWN;
            z->st[from].ascii = t;
        }
        uint32_t to = lz_run(rx, z, from, c, 1, s);
        if (z->st[from].ascii) z->st[from].ascii[c[0]] = to; /* (z->st may have moved) */
        return to;
    }
    utf8proc_int32_t cp;
    if (utf8proc_iterate(c, len, &cp) != len) return LZ_DEAD;
    lz_edge *e = edge_at(z, from, (uint32_t)cp);
    if (e->from != LZ_EMPTY) return e->to;
    uint32_t to = lz_run(rx, z, from, c, len, s);
    edge_put(z, from, (uint32_t)cp, to);
    return to;
}

/* Whether the unfinished character t[0..k) (1..3 bytes) can be finished
 * from `from` (regex_mask.h: the finishes tried). */
static bool lz_tail(const sd_regex *rx, lazy *z, uint32_t from, const unsigned char *t, int k, scratch *s)
{
    uint32_t key = LZ_TAIL | (uint32_t)k << 24;
    for (int i = 0; i < k; i++) key |= (uint32_t)t[i] << (8 * i);
    lz_edge *e = edge_at(z, from, key);
    if (e->from != LZ_EMPTY) return e->to == 1;
    bool ok = false;
    for (unsigned i = 0; !ok && i < 2 + rx->n_named; i++) {
        unsigned char ch[4];
        int len = i < 2 ? finish_bound(t, k, i == 1, ch) : rx->named_len[i - 2];
        if (i >= 2) memcpy(ch, rx->named[i - 2], (size_t)len);
        ok = len > k && !memcmp(ch, t, (size_t)k) && lz_step(rx, z, from, ch, len, s) != LZ_DEAD;
    }
    edge_put(z, from, key, ok);
    return ok;
}

static bool lz_complete(const sd_regex *rx, lazy *z, uint32_t id, scratch *s)
{
    if (z->st[id].complete < 0) {
        sd_regex_state view = lz_view(rx, z, id);
        z->st[id].complete = id == LZ_START ? rx->empty_ok : run(&view, (const unsigned char *)"", 0, 0, s) >= 0;
    }
    return z->st[id].complete;
}

/* The position after bytes p[0..n) from `at` (id LZ_DEAD: refused). An
 * unfinished last character is kept pending once it can be finished. */
static lz_pos lz_walk(const sd_regex *rx, lazy *z, lz_pos at, const unsigned char *p, size_t n, scratch *s)
{
    size_t i = 0;
    while (at.id != LZ_DEAD && i < n) {
        if (at.npend == 0 && p[i] < 0x80) { /* the common case: an ASCII character */
            at.id = lz_step(rx, z, at.id, p + i, 1, s);
            i++;
            continue;
        }
        unsigned char *c = at.pend;
        int need = utf8_need(at.npend ? c[0] : p[i]);
        while (at.npend < need && i < n) c[at.npend++] = p[i++];
        if (need == 0) at.id = LZ_DEAD;
        else if (at.npend < need) at.id = lz_tail(rx, z, at.id, c, at.npend, s) ? at.id : LZ_DEAD;
        else at.id = lz_step(rx, z, at.id, c, need, s), at.npend = 0;
    }
    return at;
}

/* ---- compiling ------------------------------------------------------------ */

/* The option letters of a group "(?letters)" or "(?letters:" at p (just
 * after "(?"), or NULL when p begins no such group. */
static const char *option_letters(const char *p, size_t *n)
{
    size_t k = 0;
    while ((p[k] >= 'a' && p[k] <= 'z') || (p[k] >= 'A' && p[k] <= 'Z') || p[k] == '-' || p[k] == '^') k++;
    *n = k;
    return p[k] == ')' || p[k] == ':' ? p : NULL;
}

/* What a group opening "(?" at p (after it) does that cannot be followed a
 * piece at a time, or NULL. */
static const char *group_lacks(const char *p)
{
    size_t n;
    const char *opts = option_letters(p, &n);
    if (opts && memchr(opts, 'm', n)) return "multiline mode ((?m))";
    if (p[0] == '=' || p[0] == '!' || (p[0] == '<' && (p[1] == '=' || p[1] == '!'))) return "lookaround assertions";
    if (p[0] == '>') return "atomic groups";
    if (p[0] == 'R' || p[0] == '&' || p[0] == '+' || (p[0] >= '0' && p[0] <= '9') ||
        (p[0] == '-' && p[1] >= '0' && p[1] <= '9') || (p[0] == 'P' && p[1] == '>'))
        return "recursion and subroutine calls";
    return NULL;
}

/* The constructs PCRE2's DFA matcher cannot follow a piece at a time that
 * pattern information does not report: backtracking verbs (and the
 * alphabetic assertions written like them), \K, assertions, atomic groups,
 * recursion and subroutine calls, possessive quantifiers (each runs on the
 * piece at hand only: "(?=ab)a." refuses "a" followed by "b"), \A and \G
 * (they would match at every piece's start), multiline mode. A scan
 * skipping escapes, \Q...\E and character classes (such text inside a
 * comment is refused too). */
static const char *dfa_lacks(const char *p)
{
    bool cls = false;
    for (; *p; p++) {
        if (*p == '\\') {
            if (!p[1]) break;
            if (p[1] == 'Q') {
                const char *e = strstr(p + 2, "\\E");
                if (!e) break;
                p = e + 1;
                continue;
            }
            if (!cls && p[1] == 'K') return "\\K";
            if (!cls && (p[1] == 'A' || p[1] == 'G')) return "\\A and \\G";
            if (!cls && p[1] == 'g' && (p[2] == '<' || p[2] == '\'')) return "recursion and subroutine calls";
            p++;
        } else if (cls) {
            cls = *p != ']';
        } else if (*p == '[') {
            cls = true;
            if (p[1] == '^') p++;
            if (p[1] == ']') p++;
        } else if (*p == '(' && p[1] == '*') {
            return "backtracking verbs such as (*ACCEPT)";
        } else if (*p == '(' && p[1] == '?') {
            const char *why = group_lacks(p + 2);
            if (why) return why;
            p++; /* the '?' opens the group: not a quantifier */
        } else if ((*p == '+' || *p == '*' || *p == '?' || *p == '}') && p[1] == '+') {
            return "possessive quantifiers";
        }
    }
    return NULL;
}

/* Whether the pattern can only ever match ASCII characters — told from
 * its text, erring towards no: every byte ASCII, and nothing that matches
 * characters beyond it in UTF mode (without PCRE2_UCP: \d \w \s and POSIX
 * classes stay ASCII): no '.', no negated class, no caseless option (K and S
 * have non-ASCII case partners), no escape of a type, property or code
 * point (\D \W \S \H \V \h \v \N \R \X \p \P \x \o, octal digits). */
static bool ascii_only(const char *p)
{
    bool cls = false;
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x80 || (c == '.' && !cls) || !strncmp(p, "[^", 2) || !strncmp(p, "[:^", 3)) return false;
        if (c == '\\') {
            if (!p[1] || strchr("DWSHVNRXpPhvxo0123456789", p[1])) return false;
            p++;
        } else if (cls) {
            cls = c != ']';
        } else if (c == '[') {
            cls = true;
            if (p[1] == ']') p++;
        } else if (c == '(' && p[1] == '?') {
            size_t n;
            const char *opts = option_letters(p + 2, &n);
            if (opts && memchr(opts, 'i', n)) return false;
        }
    }
    return true;
}

static void add_named(sd_regex *rx, const unsigned char *c, int len)
{
    if (len < 2 || rx->n_named >= MAX_NAMED) return;
    for (unsigned i = 0; i < rx->n_named; i++)
        if (rx->named_len[i] == len && !memcmp(rx->named[i], c, (size_t)len)) return;
    memcpy(rx->named[rx->n_named], c, (size_t)len);
    rx->named_len[rx->n_named++] = (uint8_t)len;
}

/* The non-ASCII characters the pattern names: literally, or as \x{H...} or
 * \xHH. */
static void collect_named(sd_regex *rx)
{
    const unsigned char *p = (const unsigned char *)rx->pattern;
    for (size_t i = 0; p[i];) {
        unsigned char c[4];
        if (p[i] == '\\' && p[i + 1] == 'x') {
            char *end;
            bool braced = p[i + 2] == '{';
            unsigned long cp = strtoul((const char *)p + i + 2 + braced, &end, 16);
            size_t digits = (size_t)(end - (const char *)(p + i + 2 + braced));
            if (!braced && digits > 2) cp >>= 4 * (digits - 2), digits = 2;
            if (digits > 0 && cp >= 0x80 && cp <= 0x10FFFF) add_named(rx, c, encode((uint32_t)cp, c));
            i += 2;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate(p + i, -1, &cp);
        if (n > 1) add_named(rx, p + i, (int)n);
        i += n > 0 ? (size_t)n : 1;
    }
}

/* The pattern compiled as "(?:pattern)\z", anchored: matched whole, in *out
 * (NULL on failure: SD_ERR_ARG or SD_ERR_NOMEM with a message). The
 * pattern alone is compiled first, so that an error names its own offset
 * (and a pattern the wrapping would change, such as an unfinished \Q, fails
 * one of the two). */
static sd_status compile_wrapped(const char *pattern, pcre2_code **out, char *err, size_t errlen)
{
    size_t len = strlen(pattern);
    char *w = malloc(len + 8);
    *out = NULL;
    if (!w) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    memcpy(w, "(?:", 3);
    memcpy(w + 3, pattern, len);
    memcpy(w + 3 + len, ")\\z", 4);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF, &code, &off, NULL);
    if (re) {
        pcre2_code_free(re);
        re = pcre2_compile((PCRE2_SPTR)w, len + 6, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_NO_AUTO_POSSESS, &code, &off,
                           NULL);
        off = off > 3 ? off - 3 : 0;
    }
    free(w);
    if (!re) {
        char msg[160];
        pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
        return sd_seterr(err, errlen, SD_ERR_ARG, "the regular expression does not compile: %s (at byte %zu)", msg,
                         (size_t)off);
    }
    *out = re;
    return SD_OK;
}

/* Whether a compact copy of PCRE2's restart data restarts as the whole
 * workspace does (the layout keep_states relies on), on a pattern whose
 * runs stop on both lists. */
static bool layout_ok;

static void check_layout(void)
{
    char err[64];
    pcre2_code *re;
    compile_wrapped("ab*c|a(?:bd)+e|x[yz]{2,4}", &re, err, sizeof err);
    static const char *const first[] = {"ab", "abd", "x", "xy"}, *const more[] = {"bbc", "bde", "c", "bx", "yz", "e"};
    scratch s;
    bool ok = re && scratch_init(&s, MIN_STATES);
    sd_regex rx = {.code = re};
    for (size_t i = 0; ok && i < sizeof first / sizeof *first; i++) {
        sd_regex_state st = {.rx = &rx, .ok = true};
        ok = viable(run(&st, (const unsigned char *)first[i], strlen(first[i]), RUN_OPTS, &s));
        int *whole = ok ? malloc((size_t)s.wscount * sizeof *whole) : NULL, wscount = s.wscount;
        ok = whole && keep_states(&st, &s);
        if (whole) memcpy(whole, s.w, (size_t)s.wscount * sizeof *whole);
        for (size_t j = 0; ok && j < sizeof more / sizeof *more; j++) {
            const unsigned char *m = (const unsigned char *)more[j];
            int compact = run(&st, m, strlen(more[j]), RUN_OPTS, &s);
            if (s.wscount != wscount) {
                ok = false; /* a compact run grew the workspace (not expected of this pattern) */
                break;
            }
            memcpy(s.w, whole, (size_t)s.wscount * sizeof *whole);
            int full = pcre2_dfa_match(re, m, strlen(more[j]), 0, RUN_OPTS | PCRE2_DFA_RESTART, s.md, NULL, s.w,
                                       (PCRE2_SIZE)s.wscount);
            ok = compact == full;
        }
        free(whole);
        free(st.ws);
    }
    if (re) scratch_free(&s);
    pcre2_code_free(re);
    layout_ok = ok;
}

sd_status sd_regex_compile(const char *pattern, sd_regex **out, char *err, size_t errlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, check_layout);
    *out = NULL;
    if (!pattern) return sd_seterr(err, errlen, SD_ERR_ARG, "regular expression missing");
    if (strlen(pattern) > SD_MAX_REGEX)
        return sd_seterr(err, errlen, SD_ERR_ARG, "the regular expression is longer than %d bytes", SD_MAX_REGEX);
    if (!layout_ok)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "output by a regular expression is unavailable: this "
                         "PCRE2 library's DFA restart data is not laid out as expected");
    pcre2_code *re;
    sd_status st = compile_wrapped(pattern, &re, err, errlen);
    if (st != SD_OK) return st;
    uint32_t backref = 0, behind = 0, bsc = 0;
    pcre2_pattern_info(re, PCRE2_INFO_BACKREFMAX, &backref);
    pcre2_pattern_info(re, PCRE2_INFO_MAXLOOKBEHIND, &behind);
    pcre2_pattern_info(re, PCRE2_INFO_HASBACKSLASHC, &bsc);
    const char *lacks = dfa_lacks(pattern);
    if (!lacks)
        lacks = backref ? "back-references or conditions" : behind ? "lookbehind, \\b or \\B" : bsc ? "\\C" : NULL;
    sd_regex *rx = lacks ? NULL : calloc(1, sizeof *rx);
    if (!rx) {
        pcre2_code_free(re);
        if (lacks)
            return sd_seterr(err, errlen, SD_ERR_ARG,
                             "the regular expression uses %s, which output by a "
                             "regular expression does not support (PCRE2's DFA matcher)",
                             lacks);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    rx->code = re;
    rx->lz = lz_new();
    rx->pattern = strdup(pattern);
    rx->named = malloc(MAX_NAMED * sizeof *rx->named);
    rx->named_len = malloc(MAX_NAMED);
    scratch s;
    bool ok = scratch_init(&s, MIN_STATES);
    if (!rx->lz || !rx->pattern || !rx->named || !rx->named_len || !ok) {
        scratch_free(&s);
        sd_regex_free(rx);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    rx->ascii = ascii_only(pattern);
    sd_regex_state start = {.rx = rx, .ok = true};
    rx->empty_ok = run(&start, (const unsigned char *)"", 0, 0, &s) >= 0; /* (the workspace grows as needed) */
    scratch_free(&s);
    collect_named(rx);
    *out = rx;
    return SD_OK;
}

void sd_regex_free(sd_regex *rx)
{
    if (!rx) return;
    pcre2_code_free(rx->code);
    lz_free(rx->lz);
    free(rx->pattern);
    free(rx->named);
    free(rx->named_len);
    free(rx);
}

const char *sd_regex_pattern(const sd_regex *rx) { return rx ? rx->pattern : NULL; }

char *sd_regex_of_choices(const char *const *choices, const size_t *lens, size_t n, char *err, size_t errlen)
{
    if (n == 0) return sd_seterr(err, errlen, SD_ERR_ARG, "no choices"), NULL;
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = (const unsigned char *)choices[i];
        for (size_t j = 0; j < lens[i];) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate(c + j, (utf8proc_ssize_t)(lens[i] - j), &cp);
            if (k <= 0 || cp == 0)
                return sd_seterr(err, errlen, SD_ERR_ARG, "choice %zu is not text (%s)", i,
                                 k <= 0 ? "not UTF-8" : "a NUL character"),
                       NULL;
            j += (size_t)k;
        }
        total += 2 * lens[i] + 1;
    }
    char *out = malloc(total), *o = out;
    if (!out) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory"), NULL;
    for (size_t i = 0; i < n; i++) {
        if (i) *o++ = '|';
        for (size_t j = 0; j < lens[i]; j++) {
            unsigned char c = (unsigned char)choices[i][j];
            bool plain = c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
            if (!plain) *o++ = '\\';
            *o++ = (char)c;
        }
    }
    *o = '\0';
    return out;
}

/* ---- the mask ----------------------------------------------------------------- */

static bool plain_ascii(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80) return false;
    return true;
}

/* One row's work (under the memo's mutex). */
typedef struct row {
    const sd_regex *rx;
    lazy *z;
    scratch s;
    lz_pos at;       /* after the output */
    bool first[128]; /* ASCII bytes that may come first (nothing pending) */
    uint32_t *ids;   /* the text tokens that may come (whatever their logits) */
    size_t n_ids, cap;
} row;

static bool push(row *r, uint32_t t)
{
    if (r->n_ids == r->cap) {
        size_t c = r->cap ? 2 * r->cap : 1024;
        uint32_t *k = realloc(r->ids, c * sizeof *k);
        if (!k) return false;
        r->ids = k;
        r->cap = c;
    }
    r->ids[r->n_ids++] = t;
    return true;
}

/* Whether a text token with bytes p[0..n) may come. */
static bool token_ok(row *r, const char *p, size_t n)
{
    unsigned char b = (unsigned char)p[0];
    if (r->at.npend == 0 && b < 0x80) {
        if (!r->first[b]) return false;
        if (n == 1) return true;
        if (r->rx->ascii && !plain_ascii(p, n)) return false;
    } else if (r->rx->ascii) {
        return false;
    }
    return lz_walk(r->rx, r->z, r->at, (const unsigned char *)p, n, &r->s).id != LZ_DEAD;
}

/* The text tokens that may come, into r->ids: only the first-byte groups
 * that may hold one are walked. False when memory runs out. */
static bool text_tokens(row *r, const sd_json_vocab *v)
{
    for (int b = 0; b < 256; b++) {
        if (!r->at.npend && (b >= 0x80 ? r->rx->ascii : !r->first[b])) continue;
        size_t n;
        const uint32_t *ids = sd_json_vocab_first(v, b, &n);
        for (size_t i = 0; i < n; i++) {
            const char *p;
            size_t len;
            sd_json_vocab_token(v, (int32_t)ids[i], &p, &len);
            if (token_ok(r, p, len) && !push(r, ids[i])) return false;
        }
    }
    return true;
}

/* The row's position after the output, and what may come first. */
static void row_start(row *r, const sd_json_vocab *v, const int32_t *output, size_t n)
{
    r->at = (lz_pos){.id = LZ_START};
    for (size_t i = 0; output && i < n && r->at.id != LZ_DEAD; i++) {
        const char *p;
        size_t len;
        if (sd_json_vocab_token(v, output[i], &p, &len) == SD_JSON_TOKEN_TEXT)
            r->at = lz_walk(r->rx, r->z, r->at, (const unsigned char *)p, len, &r->s);
    }
    for (int b = 0; b < 128; b++) {
        unsigned char c = (unsigned char)b;
        r->first[b] =
            r->at.id != LZ_DEAD && r->at.npend == 0 && lz_step(r->rx, r->z, r->at.id, &c, 1, &r->s) != LZ_DEAD;
    }
}

/* The text tokens that may come at the row's position: remembered for the
 * last few positions (rows of one request come back to the same states:
 * a draft model's rows and then the verifier's over the same drafts, a loop
 * of the expression). The list stays the memo's; NULL when memory runs
 * out. */
static const lz_row *row_tokens(row *r, const sd_json_vocab *v)
{
    lazy *z = r->z;
    lz_row *old = &z->rows[0];
    for (int i = 0; i < LZ_ROWS; i++) {
        lz_row *e = &z->rows[i];
        if (e->ids && e->at.id == r->at.id && e->at.npend == r->at.npend &&
            !memcmp(e->at.pend, r->at.pend, (size_t)r->at.npend)) {
            e->used = ++z->clock;
            return e;
        }
        if (e->used < old->used) old = e;
    }
    if (r->at.id != LZ_DEAD && !text_tokens(r, v)) return NULL;
    free(old->ids);
    *old = (lz_row){r->at, r->ids ? r->ids : malloc(1), r->n_ids, ++z->clock};
    r->ids = NULL;
    return old->ids ? old : NULL;
}

void sd_regex_mask(const sd_json_vocab *v, const sd_regex *rx, const int32_t *output, size_t n, float *logits, int nv)
{
    if (!v || !rx || !logits || nv <= 0) return;
    row r = {.rx = rx, .z = rx->lz};
    if (!scratch_init(&r.s, MIN_STATES)) {
        scratch_free(&r.s);
        return; /* out of memory: the row is left as it is */
    }
    pthread_mutex_lock(&r.z->mu);
    if (r.z->n_edges > LZ_MAX_EDGES || r.z->n_st > LZ_MAX_STATES) lz_clear(r.z);
    row_start(&r, v, output, n);
    bool alive = r.at.id != LZ_DEAD, done = alive && r.at.npend == 0 && lz_complete(rx, r.z, r.at.id, &r.s);
    const lz_row *e = row_tokens(&r, v);
    /* the row is refused whole, and what may come put back: the text tokens, and EOS when the text is matched
     * whole (or when it is refused, or nothing else may come: EOS ends it) */
    size_t n_kept = 0, n_others;
    struct kept {
        uint32_t t;
        float logit;
    } *kept = e ? malloc((e->n + 64) * sizeof *kept) : NULL;
    for (size_t i = 0; kept && i < e->n; i++) {
        uint32_t t = e->ids[i];
        if ((int)t < nv && logits[t] != -INFINITY) kept[n_kept++] = (struct kept){t, logits[t]};
    }
    const uint32_t *others = sd_json_vocab_first(v, 256, &n_others);
    bool eos = done || !alive || n_kept == 0;
    for (size_t i = 0; kept && eos && i < n_others && n_kept < e->n + 64; i++) {
        const char *p;
        size_t len;
        uint32_t t = others[i];
        if ((int)t < nv && logits[t] != -INFINITY && sd_json_vocab_token(v, (int32_t)t, &p, &len) == SD_JSON_TOKEN_EOS)
            kept[n_kept++] = (struct kept){t, logits[t]};
    }
    pthread_mutex_unlock(&r.z->mu);
    if (kept) {
        for (int t = 0; t < nv; t++) logits[t] = -INFINITY;
        for (size_t i = 0; i < n_kept; i++) logits[kept[i].t] = kept[i].logit;
    }
    free(kept);
    free(r.ids);
    scratch_free(&r.s);
}
