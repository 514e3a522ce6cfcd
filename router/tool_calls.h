/* tool_calls.h — tool calls in generated text (the Hermes format that
 * Qwen 2.5 / 3, Hermes and many fine-tunes write):
 *
 *   <tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 *
 * A splitter follows a choice's text as it is generated: the text before the
 * first "<tool_call>" is content (emitted as soon as it cannot be the start
 * of the marker), everything from the marker on is held. At the end the
 * held text is parsed: every block (the last may lack its closing tag, as
 * when the model ends with EOS) must hold a JSON object with a string
 * "name" and "arguments" (an object, or a string holding one); the calls
 * come back as OpenAI tool_call objects ({"id", "type": "function",
 * "function": {"name", "arguments": JSON text}}). Anything malformed: no
 * calls, and the held text is content after all. A forced tool choice
 * (the output constrained to JSON by a schema, http_api.c) is read as JSON
 * instead. Pure; no I/O. */
#ifndef SD_TOOL_CALLS_H
#define SD_TOOL_CALLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

#define SD_TOOL_CALL_OPEN "<tool_call>"
#define SD_TOOL_CALL_CLOSE "</tool_call>"

/* Parses held text (starting at "<tool_call>"): a JSON array of tool_call
 * objects, ids "<id_base>-<i>" (new reference), or NULL when a block is
 * malformed or there is none. */
json_t *sd_tool_calls_parse(const char *text, size_t len, const char *id_base);

/* Parses the output of a forced tool choice (tool_choice "required": a
 * JSON array of {"name", "parameters"} objects; a named function, `name`
 * not NULL: its arguments object) into tool_call objects as above; NULL
 * when the text is not that (it ran out of tokens). */
json_t *sd_tool_calls_forced(const char *text, size_t len, const char *name, const char *id_base);

/* The format of tool calls in an answer (vLLM's --tool-call-parser names:
 * "hermes"; "llama3_json" and "mistral" read the same way as JSON). */
typedef enum sd_tool_fmt {
    SD_TOOL_FMT_HERMES = 0, /* <tool_call>{…}</tool_call> blocks after any content */
    SD_TOOL_FMT_JSON,       /* the whole answer is JSON: {"name", "parameters" | "arguments"} objects (several
                             * separated by ';', Llama 3.x) or an array of them (Mistral, its [TOOL_CALLS]
                             * control token not in the text); anything else is content */
} sd_tool_fmt;

/* The format a parser name stands for; -1 when unknown. */
int sd_tool_fmt_parse(const char *name);

/* Parses a whole answer in SD_TOOL_FMT_JSON; NULL when it is not calls. */
json_t *sd_tool_calls_json(const char *text, size_t len, const char *id_base);

typedef struct sd_tool_split {
    sd_buf pending;   /* content that may still be the start of the marker */
    sd_buf held;      /* from the marker on */
    bool in_call;     /* the marker was seen */
    bool forced;      /* tool_choice required / named: all the text is held (sd_tool_split_force) */
    const char *name; /* ... the named function (borrowed), NULL for required */
    uint8_t fmt;      /* sd_tool_fmt (0: Hermes) */
    bool decided;     /* JSON format: the answer's first byte after whitespace was not '{' or '[': content */
} sd_tool_split;

/* A forced tool choice: every byte is held, and parsed at the end by
 * sd_tool_calls_forced (name borrowed; NULL: required). */
void sd_tool_split_force(sd_tool_split *s, const char *name);

/* Feeds generated text; appends to *content what is content for sure (in
 * the JSON format: all of it once the answer's first byte after whitespace
 * is not '{' or '['; else nothing until the end). */
void sd_tool_split_feed(sd_tool_split *s, const char *text, size_t len, sd_buf *content);

/* End of the text: the calls (as sd_tool_calls_parse, or
 * sd_tool_calls_forced when forced), or NULL with the held and pending text
 * appended to *content. Frees the splitter's buffers. */
json_t *sd_tool_split_end(sd_tool_split *s, const char *id_base, sd_buf *content);

void sd_tool_split_free(sd_tool_split *s);

#endif
