/* span.c — see span.h. */
#include "span.h"

/* splitmix64's finaliser over the running hash and each token. */
uint64_t sd_span_hash(uint64_t h, const int32_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = h ^ ((uint64_t)(uint32_t)tokens[i] + 0x632BE59BD9B4E019ULL);
        x ^= x >> 30;
        x *= 0xBF58476D1CE4E5B9ULL;
        x ^= x >> 27;
        x *= 0x94D049BB133111EBULL;
        h = x ^ (x >> 31);
    }
    return h;
}
