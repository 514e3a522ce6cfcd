/* json_num.c — see json_num.h. */
#include "json_num.h"

#include <math.h>

bool sd_json_whole(const json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (!json_is_real(v)) return false;
    double d = json_real_value(v);
    if (d != floor(d) || !(fabs(d) < 9007199254740992.0)) return false; /* 2^53 */
    *out = (long long)d;
    return true;
}
