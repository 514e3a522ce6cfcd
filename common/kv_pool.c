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
    int32_t *refs;       /* reference count per block */
};

sd_kv_pool *sd_kv_pool_new(int n_blocks, int block_size)
{
    if (n_blocks <= 0 || block_size <= 0) return NULL;
    sd_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    p->refs = calloc((size_t)n_blocks, sizeof(int32_t));
    if (!p->free_stack || !p->refs) {
        sd_kv_pool_free(p);
        return NULL;
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* block 0 on top of the stack */
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return p;
}

void sd_kv_pool_free(sd_kv_pool *p)
{
    if (!p) return;
    free(p->free_stack);
    free(p->refs);
    free(p);
}

int sd_kv_pool_block_size(const sd_kv_pool *p) { return p->block_size; }
int sd_kv_pool_total(const sd_kv_pool *p) { return p->n_blocks; }
int sd_kv_pool_free_count(const sd_kv_pool *p) { return p->n_free; }

int sd_kv_blocks_for(const sd_kv_pool *p, int n)
{
    return n <= 0 ? 0 : (n + p->block_size - 1) / p->block_size;
}

bool sd_kv_can_admit(const sd_kv_pool *p, int n)
{
    return sd_kv_blocks_for(p, n) <= p->n_free;
}

void sd_kv_seq_init(sd_kv_seq *seq)
{
    memset(seq, 0, sizeof *seq);
}

static void unref_block(sd_kv_pool *p, int32_t b)
{
    if (--p->refs[b] == 0) p->free_stack[p->n_free++] = b;
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
    if (add > p->n_free) return SD_ERR_NOSPACE;
    if (grow_table(seq, need) != 0) return SD_ERR_NOMEM;
    for (int i = 0; i < add; i++) {
        int32_t b = p->free_stack[--p->n_free];
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
}

void sd_kv_seq_release(sd_kv_pool *p, sd_kv_seq *seq)
{
    shrink_to(p, seq, 0);
    free(seq->blocks);
    sd_kv_seq_init(seq);
}

sd_status sd_kv_seq_share_prefix(sd_kv_pool *p, sd_kv_seq *dst, const sd_kv_seq *src, int n)
{
    if (dst->n_blocks != 0 || n > src->len) return SD_ERR_ARG;
    int full = n / p->block_size;
    if (grow_table(dst, full) != 0) return SD_ERR_NOMEM;
    for (int i = 0; i < full; i++) {
        dst->blocks[i] = src->blocks[i];
        p->refs[src->blocks[i]]++;
    }
    dst->n_blocks = full;
    dst->len = full * p->block_size;
    return SD_OK;
}
