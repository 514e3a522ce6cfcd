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
 * free list when its count drops to zero — unless it is registered in the
 * prefix cache: full committed blocks a caller registers with their tokens
 * (sd_kv_cache_register) are found again by token prefix
 * (sd_kv_cache_match) and taken by another sequence (sd_kv_seq_take); when
 * nobody holds them they stay cached, and a reservation that finds no free
 * block evicts the least recently released one. Not thread-safe: one owner. */
#ifndef SD_KV_POOL_H
#define SD_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct sd_kv_pool sd_kv_pool;

typedef struct sd_kv_seq {
    int32_t *blocks; /* block table: blocks[i] covers positions [i*bs, (i+1)*bs) */
    int n_blocks;
    size_t cap;   /* allocated entries of blocks[] */
    int len;      /* committed positions */
    int reserved; /* positions reserved past len */
} sd_kv_seq;

/* Creates a pool of n_blocks blocks of block_size positions in *out; the
 * caller frees it with sd_kv_pool_free. Returns SD_OK, or SD_ERR_ARG (a
 * count or size below 1) or SD_ERR_NOMEM with a message in err; *out is NULL
 * then. */
sd_status sd_kv_pool_new(int n_blocks, int block_size, sd_kv_pool **out, char *err, size_t errlen);
void sd_kv_pool_free(sd_kv_pool *pool);

int sd_kv_pool_block_size(const sd_kv_pool *pool);
int sd_kv_pool_total(const sd_kv_pool *pool);
/* Blocks a reservation can get: free ones plus cached ones nobody holds. */
int sd_kv_pool_free_count(const sd_kv_pool *pool);
/* Cached blocks nobody holds (evictable), and evictions so far. */
int sd_kv_pool_cached_count(const sd_kv_pool *pool);
uint64_t sd_kv_pool_evictions(const sd_kv_pool *pool);

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
 * blocks, LIFO. A block left partly filled is unregistered (it will be
 * written again); one shared with another sequence is released instead,
 * so len ends at the block boundary below new_len. */
void sd_kv_truncate(sd_kv_pool *pool, sd_kv_seq *seq, int new_len);

/* Releases every block of seq and frees its table; seq is empty afterwards. */
void sd_kv_seq_release(sd_kv_pool *pool, sd_kv_seq *seq);

/* Prefix cache. Registers full committed block i of seq as holding
 * tokens[0..block_size) (the tokens at its positions), chained to block
 * i - 1's registration: found again only after the same blocks before it.
 * Nothing happens when the block is not full and committed, is registered
 * already, follows an unregistered block, or an equal block is registered. */
void sd_kv_cache_register(sd_kv_pool *pool, const sd_kv_seq *seq, int i, const int32_t *tokens);

/* The registered blocks holding tokens' first whole blocks, in order, at
 * most max_blocks: out[0..n), n returned. Matches compare the tokens
 * themselves (and the chain), not only a hash. */
int sd_kv_cache_match(const sd_kv_pool *pool, const int32_t *tokens, int max_blocks, int32_t *out);

/* Makes the empty seq hold blocks[0..n) (from sd_kv_cache_match; reference
 * counts +1, taken off the evictable list) as its committed prefix.
 * SD_ERR_ARG when seq is not empty, SD_ERR_NOMEM on table allocation. */
sd_status sd_kv_seq_take(sd_kv_pool *pool, sd_kv_seq *seq, const int32_t *blocks, int n);

/* Slot index (block * block_size + offset) of position pos in seq. */
static inline int32_t sd_kv_slot(const sd_kv_seq *seq, int block_size, int pos)
{
    return seq->blocks[pos / block_size] * block_size + pos % block_size;
}

#endif
