/* json_mask.h — JSON output (the API's response_format {"type":
 * "json_object"}): which tokens may come next so that the output stays a
 * prefix of one JSON object (RFC 8259), and ends only when the object is
 * complete.
 *
 * A byte-level pushdown automaton (sd_json_state) follows the output; a
 * token may come next when the automaton accepts every one of its bytes
 * (sd_tok_vocab_bytes). The object ends the output: after its closing brace
 * only EOS may come; EOS never comes before. The JSON written is the RFC's,
 * with bounds so that a constrained model cannot run away or produce what
 * common parsers refuse: the object starts the output (no whitespace before
 * it), at most SD_JSON_MAX_WS whitespace bytes in a row inside it, nesting
 * at most SD_JSON_MAX_DEPTH deep, and no \u escape of a UTF-16
 * surrogate (characters beyond the BMP are written as UTF-8; strings are
 * valid UTF-8 with no control characters).
 *
 * The mask is a pure function of the output tokens, so applying it to a
 * verify span's rows (output + the drafts before each row) gives what plain
 * decoding would: speculation stays exact (sampler.h's logits processors).
 * Cost: one pass over the output's bytes, then one automaton run per token
 * whose first byte the state accepts (a token table lookup for the others).
 *
 * Ownership: an sd_json_vocab is immutable once built and shared by every
 * request of a model (any thread). */
#ifndef SD_JSON_MASK_H
#define SD_JSON_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "status.h"
#include "tokenizer.h"

#define SD_JSON_MAX_DEPTH 32 /* nested objects / arrays */
#define SD_JSON_MAX_WS 64    /* whitespace bytes in a row */

/* The automaton's state after some bytes (plain data: copy to branch). */
typedef struct sd_json_state {
    uint8_t stack[SD_JSON_MAX_DEPTH]; /* open containers: 0 object, 1 array */
    uint8_t depth;
    uint8_t mode;  /* what may come next (json_mask.c) */
    uint8_t key;   /* the string being read is an object key */
    uint8_t left;  /* hex digits of a \u escape, continuation bytes of a character, or a literal's position */
    uint8_t aux;   /* the literal being read; a \u escape's first digit */
    uint8_t lo, hi; /* the next continuation byte's range */
    uint8_t ws;    /* whitespace bytes in a row */
} sd_json_state;

/* The state before any output: '{' comes first. */
void sd_json_init(sd_json_state *st);

/* Feeds n bytes; false (state then undefined) when they cannot continue a
 * JSON object prefix within the bounds above. */
bool sd_json_feed(sd_json_state *st, const char *p, size_t n);

/* True when the bytes so far are one complete JSON object (only EOS may
 * follow). */
bool sd_json_complete(const sd_json_state *st);

typedef struct sd_json_vocab sd_json_vocab;

/* The token table of a model: every id's bytes (from the tokenizer), its
 * EOS ids (eos[0..n_eos)), and vocab (the model's logits width; ids the
 * tokenizer lacks never come). Special tokens other than EOS never come,
 * nor do tokens without bytes. NULL on failure (message in err). */
sd_json_vocab *sd_json_vocab_new(const sd_tok *tok, int vocab, const int *eos, int n_eos, char *err, size_t errlen);
void sd_json_vocab_free(sd_json_vocab *v);

/* The same from a checkpoint directory: its tokenizer.json, c's vocab_size
 * and EOS ids. NULL when the tokenizer is missing or cannot load (err). */
sd_json_vocab *sd_json_vocab_load(const char *model_dir, const sd_model_config *c, char *err, size_t errlen);

/* Sets logits[t] = -inf for every t < nv that cannot come after the output
 * output[0..n) (its tokens' bytes fed to the automaton; EOS and special
 * tokens in it add none). An output the automaton refuses (not produced
 * under this mask) leaves only EOS. */
void sd_json_mask(const sd_json_vocab *v, const int32_t *output, size_t n, float *logits, int nv);

#endif
