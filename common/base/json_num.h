/* json_num.h — whole numbers read from JSON one way everywhere (a
 * checkpoint's config.json, a request's fields): an integer, or a number
 * written with a fraction of zero (16.0, as Python's json writes a float), of
 * magnitude below 2^53 so that it is exact. */
#ifndef SD_JSON_NUM_H
#define SD_JSON_NUM_H

#include <jansson.h>
#include <stdbool.h>

/* True, and *out set, when v is such a whole number; false (and *out
 * untouched) for anything else: a fraction, a string, NULL. */
bool sd_json_whole(const json_t *v, long long *out);

#endif
