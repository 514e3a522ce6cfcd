/* tokenizer.h — Hugging Face tokenizer.json (BPE) encode / decode.
 *
 * Supports: ByteLevel pre-tokenisation (GPT-2 regex), Split(regex) +
 * ByteLevel (Qwen3, Llama 3), SentencePiece-style BPE (Prepend/Replace "▁"
 * normaliser, byte_fallback, Llama 2 decoder chain), NFC normalisation,
 * added/special tokens matched in the text as HF does (lstrip/rstrip/
 * normalized flags), ignore_merges, BOS from the post-processor, decoding with
 * and without special tokens, and incremental (streaming) decoding that never
 * emits a broken UTF-8 sequence. Regexes use PCRE2, normalisation utf8proc.
 *
 * A loaded sd_tok is immutable and safe to share between threads. */
#ifndef SD_TOKENIZER_H
#define SD_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct sd_tok sd_tok;
typedef struct sd_tok_stream sd_tok_stream;

/* Loads tokenizer.json from path. Unsupported components (another model
 * type, an unknown normaliser / pre-tokeniser / decoder) are refused with a
 * message naming them. On success *out is owned by the caller. */
sd_status sd_tok_load(const char *path, sd_tok **out, char *err, size_t errlen);

/* Frees the tokenizer; NULL is a no-op. */
void sd_tok_free(sd_tok *tok);

/* Number of ids: max(vocab id, added-token id) + 1. */
int sd_tok_vocab_size(const sd_tok *tok);

/* Encodes len bytes of UTF-8 text. add_special: apply the post-processor
 * (e.g. prepend BOS) as HF's add_special_tokens=True. On success *ids is a
 * malloc'd array the caller frees (may be NULL when *n == 0).
 * Invalid UTF-8 input is rejected with SD_ERR_FORMAT. */
sd_status sd_tok_encode(const sd_tok *tok, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n,
                        char *err, size_t errlen);

/* Decodes ids to text as HF's decode(ids, skip_special_tokens=skip_special).
 * *text is malloc'd, NUL-terminated, owned by the caller. Invalid byte
 * sequences become U+FFFD as in HF. Out-of-range ids are SD_ERR_ARG. */
sd_status sd_tok_decode(const sd_tok *tok, const int32_t *ids, size_t n, bool skip_special, char **text, size_t *len,
                        char *err, size_t errlen);

/* Id of a token given its exact vocab / added-token string; -1 if absent. */
int32_t sd_tok_token_id(const sd_tok *tok, const char *content);

/* Raw vocab string of id (e.g. "Ġthe"), or NULL when out of range. */
const char *sd_tok_token_str(const sd_tok *tok, int32_t id);

/* True when id is an added token marked "special". */
bool sd_tok_is_special(const sd_tok *tok, int32_t id);

/* BOS id the post-processor adds with add_special, or -1 when it adds none. */
int32_t sd_tok_bos_id(const sd_tok *tok);

/* A 64-bit fingerprint of everything that affects ids (vocab, merges,
 * added tokens, normaliser, pre-tokeniser): two tokenizers with equal
 * fingerprints encode and decode identically. */
uint64_t sd_tok_fingerprint(const sd_tok *tok);

/* Every id's raw bytes, as the decoder turns the token into text in the
 * middle of a sequence (ByteLevel characters back to bytes, <0xNN> as byte
 * NN, Replace steps such as "▁" → " "), before any UTF-8 repair: token
 * id's bytes are (*data)[(*off)[id] .. (*off)[id + 1]). Both malloc'd, owned
 * by the caller; ids without a string have none. For byte-level
 * constraints on the output (structured output). */
sd_status sd_tok_vocab_bytes(const sd_tok *tok, char **data, uint32_t **off, char *err, size_t errlen);

/* Incremental decoding for streaming. The stream borrows tok (which must
 * outlive it). Each push returns the text that became final with this token:
 * bytes of an unfinished UTF-8 character are held back until complete. The
 * concatenation of all pushes plus the final flush equals
 * sd_tok_decode(all ids, skip_special).
 * sd_tok_stream_new puts a new stream in *out (the caller frees it with
 * sd_tok_stream_free) and returns SD_OK, or SD_ERR_ARG (tok NULL) or
 * SD_ERR_NOMEM with a message in err; *out is NULL then. */
sd_status sd_tok_stream_new(const sd_tok *tok, bool skip_special, sd_tok_stream **out, char *err, size_t errlen);

/* Feeds one id. *out points to a buffer owned by the stream, valid until the
 * next call, holding *outlen bytes (possibly 0). */
sd_status sd_tok_stream_push(sd_tok_stream *s, int32_t id, const char **out, size_t *outlen);

/* Emits whatever is held back (incomplete sequences as U+FFFD). */
sd_status sd_tok_stream_flush(sd_tok_stream *s, const char **out, size_t *outlen);

void sd_tok_stream_free(sd_tok_stream *s);

#endif
