/* kv_pool.c — see kv_pool.h. */
#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"

struct sd_kv_pool {
    int n_blocks;
    int block_size;
    int32_t *free_stack; /* LIFO of free block ids */
    int n_free;
    int32_t *refs; /* reference count per block */
    /* prefix cache: registered full blocks, found by (parent uid, tokens) */
    uint64_t *uid;                /* per block: its registration (0: not registered) */
    uint64_t *parent;             /* ... the uid of the block before it (0: the first block) */
    int32_t *toks;                /* ... its tokens [n_blocks * block_size] */
    int32_t *lru_prev, *lru_next; /* registered blocks nobody holds, least recently released first */
    int32_t lru_head, lru_tail;
    int n_cached; /* blocks on that list */
    int32_t *ht;  /* open addressing (linear probing): block id or -1 */
    size_t ht_mask;
    uint64_t next_uid, evictions;
};

sd_status sd_kv_pool_new(int n_blocks, int block_size, sd_kv_pool **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_blocks <= 0 || block_size <= 0)
        return sd_seterr(err, errlen, SD_ERR_ARG, "KV pool: %d blocks of %d positions (both must be positive)",
                         n_blocks, block_size);
    sd_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return sd_seterr(err, errlen, SD_ERR_NOMEM, "KV pool: out of memory");
    size_t nb = (size_t)n_blocks, ht = 16;
    while (ht < 2 * nb) ht *= 2;
    p->free_stack = malloc(nb * sizeof(int32_t));
    p->refs = calloc(nb, sizeof(int32_t));
    p->uid = calloc(nb, sizeof *p->uid);
    p->parent = calloc(nb, sizeof *p->parent);
    p->toks = malloc(nb * (size_t)block_size * sizeof *p->toks);
    p->lru_prev = malloc(nb * sizeof *p->lru_prev);
    p->lru_next = malloc(nb * sizeof *p->lru_next);
    p->ht = malloc(ht * sizeof *p->ht);
    if (!p->free_stack || !p->refs || !p->uid || !p->parent || !p->toks || !p->lru_prev || !p->lru_next || !p->ht) {
        sd_kv_pool_free(p);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "KV pool: out of memory for %d blocks of %d positions", n_blocks,
                         block_size);
    }
    memset(p->ht, 0xff, ht * sizeof *p->ht); /* -1 */
    p->ht_mask = ht - 1;
    p->lru_head = p->lru_tail = -1;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* block 0 on top of the stack */
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return SD_OK;
}

void sd_kv_pool_free(sd_kv_pool *p)
{
    if (!p) return;
    free(p->free_stack);
    free(p->refs);
    free(p->uid);
    free(p->parent);
    free(p->toks);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->ht);
    free(p);
}

int sd_kv_pool_block_size(const sd_kv_pool *p) { return p->block_size; }
int sd_kv_pool_total(const sd_kv_pool *p) { return p->n_blocks; }
int sd_kv_pool_free_count(const sd_kv_pool *p) { return p->n_free + p->n_cached; }
int sd_kv_pool_cached_count(const sd_kv_pool *p) { return p->n_cached; }
uint64_t sd_kv_pool_evictions(const sd_kv_pool *p) { return p->evictions; }

int sd_kv_blocks_for(const sd_kv_pool *p, int n) { return n <= 0 ? 0 : (n + p->block_size - 1) / p->block_size; }

bool sd_kv_can_admit(const sd_kv_pool *p, int n) { return sd_kv_blocks_for(p, n) <= sd_kv_pool_free_count(p); }

void sd_kv_seq_init(sd_kv_seq *seq) { memset(seq, 0, sizeof *seq); }

static int grow_table(sd_kv_seq *seq, int need);

/* ---------------------------------------------------------------- prefix cache */

static size_t key_hash(const sd_kv_pool *p, uint64_t parent, const int32_t *toks)
{
    uint64_t h = parent * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    for (int i = 0; i < p->block_size; i++) {
        h ^= (uint32_t)toks[i];
        h *= 0x100000001B3ULL;
        h ^= h >> 29;
    }
    return (size_t)h & p->ht_mask;
}

static bool key_eq(const sd_kv_pool *p, int32_t b, uint64_t parent, const int32_t *toks)
{
    return p->parent[b] == parent &&
           !memcmp(p->toks + (size_t)b * (size_t)p->block_size, toks, (size_t)p->block_size * sizeof *toks);
}

/* The registered block with this key, or -1. */
static int32_t ht_find(const sd_kv_pool *p, uint64_t parent, const int32_t *toks)
{
    for (size_t i = key_hash(p, parent, toks);; i = (i + 1) & p->ht_mask) {
        int32_t b = p->ht[i];
        if (b < 0) return -1;
        if (key_eq(p, b, parent, toks)) return b;
    }
}

/* Removes block b's entry (backward-shift deletion keeps probe runs whole). */
static void ht_remove(sd_kv_pool *p, int32_t b)
{
    size_t bs = (size_t)p->block_size, i = key_hash(p, p->parent[b], p->toks + (size_t)b * bs);
    while (p->ht[i] != b) i = (i + 1) & p->ht_mask;
    for (size_t j = (i + 1) & p->ht_mask; p->ht[j] >= 0; j = (j + 1) & p->ht_mask) {
        int32_t c = p->ht[j];
        size_t home = key_hash(p, p->parent[c], p->toks + (size_t)c * bs);
        /* c may move into the hole at i when its home is not within (i, j] */
        if (((j - home) & p->ht_mask) >= ((j - i) & p->ht_mask)) {
            p->ht[i] = c;
            i = j;
        }
    }
    p->ht[i] = -1;
    p->uid[b] = 0;
}

static void lru_unlink(sd_kv_pool *p, int32_t b)
{
    if (p->lru_prev[b] >= 0) p->lru_next[p->lru_prev[b]] = p->lru_next[b];
    else p->lru_head = p->lru_next[b];
    if (p->lru_next[b] >= 0) p->lru_prev[p->lru_next[b]] = p->lru_prev[b];
    else p->lru_tail = p->lru_prev[b];
    p->n_cached--;
}

static void lru_push(sd_kv_pool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

/* A block for a reservation: a free one, else the least recently released
 * cached one (its registration dropped). */
static int32_t take_block(sd_kv_pool *p)
{
    if (p->n_free > 0) return p->free_stack[--p->n_free];
    int32_t b = p->lru_head;
    lru_unlink(p, b);
    ht_remove(p, b);
    p->evictions++;
    return b;
}

static void unref_block(sd_kv_pool *p, int32_t b)
{
    if (--p->refs[b] > 0) return;
    if (p->uid[b]) lru_push(p, b); /* kept for the prefix cache */
    else p->free_stack[p->n_free++] = b;
}

void sd_kv_cache_register(sd_kv_pool *p, const sd_kv_seq *seq, int i, const int32_t *tokens)
{
    if (i < 0 || (i + 1) * p->block_size > seq->len) return; /* not a full committed block */
    int32_t b = seq->blocks[i];
    uint64_t parent = i > 0 ? p->uid[seq->blocks[i - 1]] : 0;
    if (p->uid[b] || (i > 0 && !parent) || ht_find(p, parent, tokens) >= 0) return;
    p->uid[b] = ++p->next_uid;
    p->parent[b] = parent;
    memcpy(p->toks + (size_t)b * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    size_t h = key_hash(p, parent, tokens);
    while (p->ht[h] >= 0) h = (h + 1) & p->ht_mask;
    p->ht[h] = b;
}

int sd_kv_cache_match(const sd_kv_pool *p, const int32_t *tokens, int max_blocks, int32_t *out)
{
    uint64_t parent = 0;
    int n = 0;
    for (; n < max_blocks; n++) {
        int32_t b = ht_find(p, parent, tokens + (size_t)n * (size_t)p->block_size);
        if (b < 0) break;
        out[n] = b;
        parent = p->uid[b];
    }
    return n;
}

sd_status sd_kv_seq_take(sd_kv_pool *p, sd_kv_seq *seq, const int32_t *blocks, int n)
{
    if (seq->n_blocks != 0) return SD_ERR_ARG;
    if (grow_table(seq, n) != 0) return SD_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (p->refs[b]++ == 0) lru_unlink(p, b);
        seq->blocks[i] = b;
    }
    seq->n_blocks = n;
    seq->len = n * p->block_size;
    return SD_OK;
}

/* Releases table entries past `keep` blocks, last first. */
static void shrink_to(sd_kv_pool *p, sd_kv_seq *seq, int keep)
{
    while (seq->n_blocks > keep) unref_block(p, seq->blocks[--seq->n_blocks]);
}

static int grow_table(sd_kv_seq *seq, int need)
{
    return sd_grow(&seq->blocks, &seq->cap, (size_t)need, sizeof *seq->blocks) == SD_OK ? 0 : -1;
}

sd_status sd_kv_reserve(sd_kv_pool *p, sd_kv_seq *seq, int n)
{
    if (n < 0) return SD_ERR_ARG;
    seq->reserved = 0;
    shrink_to(p, seq, sd_kv_blocks_for(p, seq->len));
    int need = sd_kv_blocks_for(p, seq->len + n);
    int add = need - seq->n_blocks;
    if (add > sd_kv_pool_free_count(p)) return SD_ERR_NOSPACE;
    if (grow_table(seq, need) != 0) return SD_ERR_NOMEM;
    for (int i = 0; i < add; i++) {
        int32_t b = take_block(p);
        p->refs[b] = 1;
        seq->blocks[seq->n_blocks++] = b;
    }
    seq->reserved = n;
    return SD_OK;
}

void sd_kv_commit(sd_kv_pool *p, sd_kv_seq *seq, int n)
{
    if (n > seq->reserved) n = seq->reserved;
    if (n < 0) n = 0;
    seq->len += n;
    seq->reserved = 0;
    shrink_to(p, seq, sd_kv_blocks_for(p, seq->len));
}

void sd_kv_truncate(sd_kv_pool *p, sd_kv_seq *seq, int new_len)
{
    if (new_len < 0) new_len = 0;
    if (new_len < seq->len) seq->len = new_len;
    seq->reserved = 0;
    shrink_to(p, seq, sd_kv_blocks_for(p, seq->len));
    int last = seq->len / p->block_size; /* a block now partly kept will be written again */
    if (seq->len % p->block_size == 0 || last >= seq->n_blocks) return;
    int32_t b = seq->blocks[last];
    if (p->refs[b] > 1) { /* shared: drop it, the positions are computed again in a block of its own */
        seq->len = last * p->block_size;
        shrink_to(p, seq, last);
    } else if (p->uid[b]) {
        ht_remove(p, b);
    }
}

void sd_kv_seq_release(sd_kv_pool *p, sd_kv_seq *seq)
{
    shrink_to(p, seq, 0);
    free(seq->blocks);
    sd_kv_seq_init(seq);
}
