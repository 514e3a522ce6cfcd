/* json_schema.h — JSON output by a schema (the API's response_format
 * {"type": "json_schema"}): a JSON Schema compiled into a table of nodes
 * that json_mask.c's automaton follows byte by byte, so that the output is
 * one JSON value the schema accepts.
 *
 * The subset (anything else is refused with a message naming the keyword
 * and where it is, never ignored):
 * - type (one or a list), enum, const (values written compactly, as jansson
 *   writes them), properties, required, additionalProperties (absent: none
 *   when properties are given, any otherwise — OpenAI's strict mode),
 *   items, minItems, maxItems, minLength, maxLength (characters), minimum,
 *   maximum, exclusiveMinimum, exclusiveMaximum (numbers, as in draft 6 and
 *   later; on a number that is not an integer they must be whole numbers,
 *   and the number is then written without exponent), anyOf /
 *   oneOf, allOf with one schema, $ref to "#..." JSON pointers ($defs,
 *   definitions; recursion included), true / {} (any value).
 * - Annotations are ignored: title, description, default, examples,
 *   $schema, $id, $comment, deprecated, readOnly, writeOnly, and format
 *   (an annotation unless a vocabulary asserts it, as JSON Schema says).
 * - anyOf / oneOf alternatives must differ in the character they begin
 *   with (their types, or their enum values' first characters): the
 *   automaton picks the alternative by the value's first byte (so oneOf is
 *   anyOf). Several object alternatives make a discriminated union: a
 *   property each of them requires, with string values (const / enum) no
 *   two share, comes first in the object and picks the alternative (as
 *   tool calls' "name", or pydantic's discriminators); without one they
 *   are refused.
 * - Properties come in any order, each at most once; names are written as
 *   JSON writes them (no \u or \/ escapes in keys of an object with declared
 *   properties, so that equal names are equal texts).
 * Bounds: at most SD_JS_MAX_PROPS properties per object, SD_JS_MAX_ENUM
 * enum values per node, SD_JS_MAX_NODES nodes, and the automaton's nesting
 * bound (json_mask.h): a schema that needs deeper nesting is refused, and
 * the automaton never starts a value that could not be finished within it.
 *
 * Ownership: an sd_json_schema is immutable once compiled and may be shared
 * by threads; whoever compiles it frees it. */
#ifndef SD_JSON_SCHEMA_H
#define SD_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct json_t;

#define SD_JS_MAX_PROPS 64
#define SD_JS_MAX_ENUM 64
#define SD_JS_MAX_NODES 4096
#define SD_JS_NONE 0xFFFFu /* no node */
#define SD_JS_UNBOUNDED UINT32_MAX
#define SD_JS_LO_OPEN 1u
#define SD_JS_HI_OPEN 2u

typedef enum sd_js_kind {
    SD_JS_ANY, /* any JSON value (containers of any values) */
    SD_JS_OBJECT,
    SD_JS_ARRAY,
    SD_JS_STRING,
    SD_JS_NUMBER,
    SD_JS_INTEGER, /* a number without fraction or exponent */
    SD_JS_BOOLEAN,
    SD_JS_NULL,
    SD_JS_ENUM,  /* one of the items' texts, byte for byte */
    SD_JS_ANYOF, /* the alternative picked by the first byte */
    SD_JS_UNION, /* object alternatives: an object whose one property (the discriminator) comes first; its */
                 /* value (an enum whose items name their alternative) picks the object it goes on as */
} sd_js_kind;

/* A property, an enum value or an alternative. */
typedef struct sd_js_item {
    uint32_t text, len; /* property: its name as JSON writes it, without quotes; enum: the value's compact text */
    uint16_t node;      /* property: its value's node; alternative: the node; enum value: a union's */
                        /* alternative it picks (else SD_JS_NONE) */
} sd_js_item;

typedef struct sd_js_node {
    uint8_t kind;      /* sd_js_kind */
    uint8_t min_depth; /* containers a value of it must open (255: it cannot be written within the bound) */
    uint16_t child;    /* OBJECT: additional properties' node (SD_JS_NONE: none); ARRAY: the items' node */
    uint16_t n;        /* its items: properties, enum values or alternatives */
    uint32_t items;    /* ... the first, in sd_json_schema.items */
    uint64_t required; /* OBJECT: bit i = property i is required */
    uint32_t min, max; /* ARRAY: items; STRING: characters (max SD_JS_UNBOUNDED: no bound) */
    int64_t lo, hi;    /* INTEGER, NUMBER: the values allowed, lo..hi (INT64_MIN / INT64_MAX: no bound) */
    uint8_t open;      /* NUMBER: SD_JS_LO_OPEN / SD_JS_HI_OPEN: lo / hi itself excluded (an integer's bounds */
                       /* are closed: exclusive ones are moved by one) */
    uint32_t pick;     /* ANYOF: its 256 entries in picks (a first byte's node, SD_JS_NONE: none) */
} sd_js_node;

typedef struct sd_json_schema {
    sd_js_node *nodes;
    uint32_t n_nodes;
    uint16_t root;
    sd_js_item *items;
    char *text;      /* the items' texts */
    uint16_t *picks; /* the ANYOF nodes' tables */
    bool compact;    /* no whitespace outside strings (vLLM's disable_any_whitespace; the compiler leaves it */
                     /* false: whoever owns the schema sets it) */
} sd_json_schema;

/* Compiles a schema (a jansson value: an object or a boolean) into *out;
 * the caller frees it with sd_json_schema_free; the schema is not borrowed.
 * Returns SD_OK, or with *out NULL and a message in err: SD_ERR_ARG when it
 * is outside the subset above or cannot be satisfied (the message names the
 * keyword and its place as a JSON pointer), SD_ERR_NOMEM. */
sd_status sd_json_schema_compile(const struct json_t *schema, sd_json_schema **out, char *err, size_t errlen);

/* The same from a schema's JSON text (len bytes); text that is not JSON is
 * SD_ERR_ARG too. */
sd_status sd_json_schema_parse(const char *text, size_t len, sd_json_schema **out, char *err, size_t errlen);

void sd_json_schema_free(sd_json_schema *s);

/* The schema of response_format json_object: {"type": "object"} (any
 * object). Static; never freed. */
const sd_json_schema *sd_json_schema_object(void);

/* The same without whitespace outside strings (compact). */
const sd_json_schema *sd_json_schema_object_compact(void);

/* Whether a value of node may begin with byte c. */
bool sd_json_schema_starts(const sd_json_schema *s, uint16_t node, unsigned char c);

#endif
