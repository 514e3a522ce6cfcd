/* array.h — growing heap arrays: the one helper every layer uses to make
 * room in an array (or in several parallel arrays that share a capacity).
 *
 * Arrays are passed by the address of their pointer variable (a T ** as
 * void *), so one function serves every element type; the pointer is read
 * and written with memcpy, never through a cast lvalue. Capacities count
 * entries, not bytes. Growth is geometric: the new capacity is the larger of
 * the request and twice the old one (at least SD_GROW_MIN). */
#ifndef SD_ARRAY_H
#define SD_ARRAY_H

#include <stddef.h>

#include "status.h"

#define SD_GROW_MIN 8

/* Makes the array at *arr (arr: address of a T * that is NULL or from
 * malloc/realloc; elem = sizeof(T)) hold at least need entries, *cap being
 * its capacity. Contents are kept; new entries are uninitialised. Returns
 * SD_OK (nothing done when need <= *cap) or SD_ERR_NOMEM, with *arr and *cap
 * unchanged. */
sd_status sd_grow(void *arr, size_t *cap, size_t need, size_t elem);

/* One of several arrays sharing a capacity: the address of its pointer and
 * the bytes of one entry (a "row" may be many elements: elem = row bytes). */
typedef struct sd_grow_item {
    void *arr;
    size_t elem;
} sd_grow_item;

/* The item for array pointer variable p (a T *): {&p, sizeof *p}. */
#define SD_GROW_ITEM(p)           \
    {                             \
        (void *)&(p), sizeof *(p) \
    }

/* sd_grow for n parallel arrays with one capacity *cap: on SD_OK all hold
 * at least need entries. On SD_ERR_NOMEM *cap is unchanged and every array
 * still holds its old contents (some may have moved to larger blocks). */
sd_status sd_grow_all(const sd_grow_item *items, size_t n, size_t *cap, size_t need);

#endif
