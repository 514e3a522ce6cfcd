/* kv_pool.h — paged KV-cache block accounting.
 *
 * The pool hands out fixed-size blocks (block_size positions each) by id;
 * the K/V storage itself lives with the model (indexed by block id). Each
 * sequence has a block table and two lengths: `len`, the committed prefix,
 * and `reserved`, positions set aside beyond it for a speculative span.
 * A verify step reserves K+1 positions, the forward pass writes their K/V,
 * then the caller commits the accepted prefix and the rest is released,
 * last-allocated block first (LIFO), so freed blocks are reused warm.
 * Blocks carry reference counts (for shared prefixes); a block returns to the
 * free list when its count drops to zero. Not thread-safe: one owner. */
#ifndef SD_KV_POOL_H
#define SD_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef struct sd_kv_pool sd_kv_pool;

typedef struct sd_kv_seq {
    int32_t *blocks;   /* block table: blocks[i] covers positions [i*bs, (i+1)*bs) */
    int n_blocks;
    size_t cap;        /* allocated entries of blocks[] */
    int len;           /* committed positions */
    int reserved;      /* positions reserved past len */
} sd_kv_seq;

/* Creates a pool of n_blocks blocks of block_size positions. NULL on failure. */
sd_kv_pool *sd_kv_pool_new(int n_blocks, int block_size);
void sd_kv_pool_free(sd_kv_pool *pool);

int sd_kv_pool_block_size(const sd_kv_pool *pool);
int sd_kv_pool_total(const sd_kv_pool *pool);
int sd_kv_pool_free_count(const sd_kv_pool *pool);

/* Blocks needed to hold n positions. */
int sd_kv_blocks_for(const sd_kv_pool *pool, int n_positions);

/* Admission check: true when n_positions fit in the free blocks now. */
bool sd_kv_can_admit(const sd_kv_pool *pool, int n_positions);

/* An empty sequence (no blocks). */
void sd_kv_seq_init(sd_kv_seq *seq);

/* Reserves n positions past seq->len (replacing any previous reservation).
 * All-or-nothing: SD_ERR_NOSPACE when the pool lacks blocks, and then seq
 * and the pool are unchanged apart from releasing a previous reservation's
 * surplus. SD_ERR_NOMEM when the block table cannot grow. */
sd_status sd_kv_reserve(sd_kv_pool *pool, sd_kv_seq *seq, int n);

/* Commits the first n reserved positions (n <= reserved) and releases the
 * blocks no longer covering len + 0 positions (the rest of the reservation). */
void sd_kv_commit(sd_kv_pool *pool, sd_kv_seq *seq, int n);

/* Rolls the committed prefix back to new_len (<= len) and releases surplus
 * blocks, LIFO. */
void sd_kv_truncate(sd_kv_pool *pool, sd_kv_seq *seq, int new_len);

/* Releases every block of seq and frees its table; seq is empty afterwards. */
void sd_kv_seq_release(sd_kv_pool *pool, sd_kv_seq *seq);

/* Makes dst share src's committed full blocks (reference counts +1) — for a
 * common prefix. dst must be empty. SD_ERR_NOMEM on table allocation. */
sd_status sd_kv_seq_share_prefix(sd_kv_pool *pool, sd_kv_seq *dst, const sd_kv_seq *src, int n_positions);

/* Slot index (block * block_size + offset) of position pos in seq. */
static inline int32_t sd_kv_slot(const sd_kv_seq *seq, int block_size, int pos)
{
    return seq->blocks[pos / block_size] * block_size + pos % block_size;
}

#endif
