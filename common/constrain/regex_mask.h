/* regex_mask.h — output by a regular expression (vLLM's structured_outputs
 * regex / choice, guided_regex / guided_choice): which tokens may come next
 * so that the output stays a prefix of a text the expression matches whole,
 * and ends only where it matches.
 *
 * The expression is PCRE2's (Perl / Python syntax), matched in UTF-8 mode
 * over the whole output (anchored at both ends). PCRE2's DFA matcher, fed
 * the output a piece at a time (PCRE2_DFA_RESTART, hard partial matching),
 * says whether more text could still complete a match: a token may come
 * when its bytes keep that so. What cannot be followed a piece at a time
 * is refused when the expression is compiled: back-references and
 * conditions, lookaround assertions, \b / \B, atomic groups, possessive
 * quantifiers, recursion and subroutine calls, \A / \G, \K, \C,
 * backtracking verbs, multiline mode (PCRE2's DFA matcher runs such
 * constructs on the piece at hand only). A piece after the first is not the
 * text's start: ^ does not match there.
 *
 * A token that ends inside a UTF-8 character (byte-level vocabularies split
 * characters) may come when the character can be finished to one the
 * expression takes there; the finishes tried are the lowest and highest
 * characters its bytes allow and the characters the pattern names (literal
 * or \x{...}) — a character class naming neither of those through a
 * property only may refuse such a token that could have gone on (never the
 * reverse: what is kept can always be finished, with single-byte tokens).
 *
 * The mask is a pure function of the output tokens (as json_mask.h), so
 * speculation under it stays exact. Cost: one match over the output, then
 * one DFA run per token that passes a first-byte table (tokens beginning
 * with an ASCII byte the state refuses are skipped) — about 0.1–0.3 µs each.
 *
 * Ownership: an sd_regex is immutable once compiled and may be used by any
 * number of threads at once. */
#ifndef SD_REGEX_MASK_H
#define SD_REGEX_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json_mask.h"

#define SD_MAX_REGEX (64 * 1024) /* bytes of a pattern (the choices' written as one) */

typedef struct sd_regex sd_regex;

/* Compiles pattern (NUL-terminated) into *out; the caller frees it with
 * sd_regex_free. Returns SD_OK, or with *out NULL and a message in err
 * naming what is wrong: SD_ERR_ARG (no pattern, too long, PCRE2's own
 * message and offset, or the construct refused), SD_ERR_UNSUPPORTED (this
 * PCRE2 library cannot serve) or SD_ERR_NOMEM. */
sd_status sd_regex_compile(const char *pattern, sd_regex **out, char *err, size_t errlen);
void sd_regex_free(sd_regex *rx);

/* The pattern's text as given. */
const char *sd_regex_pattern(const sd_regex *rx);

/* A pattern matching exactly one of the n strings choices[i] (UTF-8, no NUL
 * byte; lens[i] bytes each): every character that is not a letter or a
 * digit escaped. Malloc'd (the caller frees); NULL with err when a choice
 * is not valid UTF-8, holds a NUL, or n is 0. */
char *sd_regex_of_choices(const char *const *choices, const size_t *lens, size_t n, char *err, size_t errlen);

/* The matcher's state after some output bytes (plain data: copy with
 * sd_regex_state_copy; the expression is borrowed). */
typedef struct sd_regex_state sd_regex_state;

/* A state before any output for rx (borrowed: it must outlive the state) in
 * *out; the caller frees it with sd_regex_state_free. Returns SD_OK, or
 * SD_ERR_ARG (rx NULL) or SD_ERR_NOMEM with a message in err; *out is NULL
 * then. */
sd_status sd_regex_state_new(const sd_regex *rx, sd_regex_state **out, char *err, size_t errlen);
void sd_regex_state_free(sd_regex_state *st);

/* Feeds n bytes; false (state then refused) when no text they begin could
 * match. */
bool sd_regex_state_feed(sd_regex_state *st, const char *p, size_t n);

/* Whether n more bytes may come (the state is not changed): they keep a
 * match possible, and a character they leave unfinished can be finished
 * (above). */
bool sd_regex_state_accepts(const sd_regex_state *st, const char *p, size_t n);

/* True when the bytes so far are matched whole (EOS may come). */
bool sd_regex_state_complete(const sd_regex_state *st);

/* Sets logits[t] = -inf for every t < nv that cannot come after the output
 * output[0..n) (its text tokens' bytes fed; EOS and special tokens in it add
 * none): text tokens the expression refuses, EOS unless the output matches
 * whole, other special tokens always. An output the expression refuses
 * (not produced under this mask), or one after which nothing may come,
 * leaves only EOS. */
void sd_regex_mask(const sd_json_vocab *v, const sd_regex *rx, const int32_t *output, size_t n, float *logits, int nv);

#endif
