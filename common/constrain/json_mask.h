/* json_mask.h — JSON output (the API's response_format {"type":
 * "json_object"} and {"type": "json_schema"}): which tokens may come next so
 * that the output stays a prefix of one JSON object (json_object) or of one
 * value a schema accepts (json_schema.h), and ends only when it is complete.
 *
 * A byte-level pushdown automaton (sd_json_state) follows the output; a
 * token may come next when the automaton accepts every one of its bytes
 * (sd_tok_vocab_bytes). The value ends the output: after it only EOS may
 * come; EOS never comes before. The JSON written is the RFC's (8259), with
 * bounds so that a constrained model cannot run away or produce what common
 * parsers refuse: the value starts the output (no whitespace before it), at
 * most SD_JSON_MAX_WS whitespace bytes in a row inside it, nesting at most
 * SD_JSON_MAX_DEPTH deep, and no \u escape of a UTF-16 surrogate
 * (characters beyond the BMP are written as UTF-8; strings are valid UTF-8
 * with no control characters). A compact schema's output has no whitespace
 * outside strings at all (json_schema.h). Under a schema the automaton never begins
 * what it could not finish (an integer's digits too: under bounds a digit
 * comes only when some integer beginning so lies within them) (a property, an item or a value that would need
 * deeper nesting, a key no declared property continues).
 *
 * The mask is a pure function of the output tokens, so applying it to a
 * verify span's rows (output + the drafts before each row) gives what plain
 * decoding would: speculation stays exact (sampler.h's logits processors).
 * Cost: one pass over the output's bytes, then the tokens that may pass:
 * inside a string only those that are not plain content (and, under a
 * length bound, the plain ones too long); elsewhere only the groups of
 * tokens whose first byte after their leading whitespace the state accepts
 * (the row is refused whole and the kept ones put back), each checked with
 * a table lookup or an automaton run — the whole vocabulary only where
 * those groups are a quarter of it or more.
 *
 * Ownership: an sd_json_vocab is immutable once built and shared by every
 * request of a model (any thread). */
#ifndef SD_JSON_MASK_H
#define SD_JSON_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "json_schema.h"
#include "status.h"
#include "tokenizer.h"

#define SD_JSON_MAX_DEPTH 32 /* nested objects / arrays */
#define SD_JSON_MAX_WS 64    /* whitespace bytes in a row */

/* An open container. */
typedef struct sd_json_frame {
    uint64_t seen;  /* object: its declared properties written (bit i: property i) */
    uint16_t node;  /* the container's schema node */
    uint16_t prop;  /* object: the node of the value after the last key */
    uint16_t count; /* array: items begun (stops at 65535) */
    uint8_t kind;   /* 0 object, 1 array */
} sd_json_frame;

/* The automaton's state after some bytes (plain data: copy to branch; the
 * schema is borrowed). */
typedef struct sd_json_state {
    const sd_json_schema *schema;
    uint64_t cand;  /* a key of declared properties or an enum value: the items its bytes still match */
    uint64_t num;   /* a number under bounds: its integer part's magnitude so far (saturating) */
    uint32_t len;   /* a string's characters so far */
    uint16_t vnode; /* the scalar being read: its node */
    uint16_t pos;   /* bytes of cand matched */
    uint8_t depth;
    uint8_t mode;   /* what may come next (json_mask.c) */
    uint8_t key;    /* the string being read is an object key */
    uint8_t left;   /* hex digits of a \u escape, continuation bytes of a character, or a literal's position */
    uint8_t aux;    /* the literal being read; a \u escape's first digit; a number under bounds: its */
                    /* fraction so far is all zeros */
    uint8_t lo, hi; /* the next continuation byte's range */
    uint8_t ws;     /* whitespace bytes in a row */
    uint8_t neg;    /* a number under bounds: it began with '-' */
    sd_json_frame stack[SD_JSON_MAX_DEPTH]; /* open containers (last: a copy needs the first depth only) */
} sd_json_state;

/* The state before any output of response_format json_object: '{' comes
 * first. */
void sd_json_init(sd_json_state *st);

/* The state before any output of a schema's value (json_schema.h; borrowed
 * for the state's life): the value starts the output, no whitespace before. */
void sd_json_init_schema(sd_json_state *st, const sd_json_schema *schema);

/* Feeds n bytes; false (state then undefined) when they cannot continue a
 * JSON object prefix within the bounds above. */
bool sd_json_feed(sd_json_state *st, const char *p, size_t n);

/* The bytes that may come next, in increasing order, into next[0..k);
 * returns k (0: nothing may come — the value is complete, or the state is a
 * refused one). */
int sd_json_next(const sd_json_state *st, unsigned char next[256]);

/* True when the bytes so far are one complete value (only EOS may follow;
 * a number or an enum value at the top may still go on). */
bool sd_json_complete(const sd_json_state *st);

typedef struct sd_json_vocab sd_json_vocab;

/* The token table of a model: every id's bytes (from the tokenizer), its
 * EOS ids (eos[0..n_eos)), and vocab (the model's logits width; ids the
 * tokenizer lacks never come). Special tokens other than EOS never come,
 * nor do tokens without bytes. The table goes to *out (the caller frees it
 * with sd_json_vocab_free; tok is not borrowed). Returns SD_OK, or with *out
 * NULL and a message in err: SD_ERR_ARG (no tokenizer, vocab < 1, EOS ids
 * missing), the tokenizer's status when its bytes cannot be had, or
 * SD_ERR_NOMEM. */
sd_status sd_json_vocab_new(const sd_tok *tok, int vocab, const int *eos, int n_eos, sd_json_vocab **out, char *err,
                            size_t errlen);
void sd_json_vocab_free(sd_json_vocab *v);

/* What token t is in v: SD_JSON_TOKEN_TEXT (its bytes in *p, *n),
 * SD_JSON_TOKEN_EOS, or SD_JSON_TOKEN_NEVER (special, empty, or outside the
 * table: never produced under a mask). */
enum { SD_JSON_TOKEN_TEXT = 0, SD_JSON_TOKEN_EOS = 1, SD_JSON_TOKEN_NEVER = 2 };
int sd_json_vocab_token(const sd_json_vocab *v, int32_t t, const char **p, size_t *n);

/* The text tokens whose first byte is b (0..255), or for b 256 the others
 * (EOS and the never produced ids below the table's size): ids in *n
 * entries, owned by v. */
const uint32_t *sd_json_vocab_first(const sd_json_vocab *v, int b, size_t *n);

/* The same from a checkpoint directory: its tokenizer.json, c's vocab_size
 * and EOS ids. Besides the above, the status of sd_tok_load (SD_ERR_IO,
 * SD_ERR_FORMAT, SD_ERR_UNSUPPORTED) when the tokenizer is missing or cannot
 * load. */
sd_status sd_json_vocab_load(const char *model_dir, const sd_model_config *c, sd_json_vocab **out, char *err,
                             size_t errlen);

/* Sets logits[t] = -inf for every t < nv that cannot come after the output
 * output[0..n) (its tokens' bytes fed to the automaton of schema, NULL:
 * json_object's; EOS and special tokens in it add none). An output the
 * automaton refuses (not produced under this mask) leaves only EOS. */
void sd_json_mask(const sd_json_vocab *v, const sd_json_schema *schema, const int32_t *output, size_t n, float *logits,
                  int nv);

#endif
