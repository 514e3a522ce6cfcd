/* array.c — geometric array growth (see array.h). */
#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The capacity after growing from cap to hold need entries. */
static size_t next_cap(size_t cap, size_t need)
{
    size_t nc = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    if (nc < SD_GROW_MIN) nc = SD_GROW_MIN;
    return nc < need ? need : nc;
}

/* Reallocates the array whose pointer variable is at slot to n entries of
 * elem bytes. */
static sd_status resize(void *slot, size_t n, size_t elem)
{
    if (elem && n > SIZE_MAX / elem) return SD_ERR_NOMEM;
    void *p;
    memcpy(&p, slot, sizeof p);
    size_t bytes = n * elem;
    void *q = realloc(p, bytes > 0 ? bytes : 1);
    if (!q) return SD_ERR_NOMEM;
    memcpy(slot, &q, sizeof q);
    return SD_OK;
}

sd_status sd_grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return SD_OK;
    size_t nc = next_cap(*cap, need);
    if (resize(arr, nc, elem) != SD_OK) return SD_ERR_NOMEM;
    *cap = nc;
    return SD_OK;
}

sd_status sd_grow_all(const sd_grow_item *items, size_t n, size_t *cap, size_t need)
{
    if (need <= *cap) return SD_OK;
    size_t nc = next_cap(*cap, need);
    for (size_t i = 0; i < n; i++)
        if (resize(items[i].arr, nc, items[i].elem) != SD_OK) return SD_ERR_NOMEM;
    *cap = nc;
    return SD_OK;
}
